package ratelog

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func newTest(burst int, every time.Duration) (*slog.Logger, *bytes.Buffer, *fakeClock) {
	var buf bytes.Buffer
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	h := New(slog.NewTextHandler(&buf, nil), Config{Burst: burst, Every: every, Now: clk.now})
	return slog.New(h), &buf, clk
}

func lines(buf *bytes.Buffer) []string {
	s := strings.TrimSpace(buf.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestBurstThenDroppedCountOnTheNextLine(t *testing.T) {
	log, buf, clk := newTest(3, time.Second)
	for i := 0; i < 1000; i++ {
		log.Warn("bad request", "i", i)
	}
	if l := lines(buf); len(l) != 3 {
		t.Fatalf("%d lines after a flood of 1000 with a burst of 3, want 3:\n%s", len(l), buf)
	}
	clk.t = clk.t.Add(time.Second)
	log.Warn("bad request", "i", 1000)
	l := lines(buf)
	if len(l) != 4 || !strings.Contains(l[3], "dropped=997") || !strings.Contains(l[3], "i=1000") {
		t.Fatalf("the line after the pause does not carry the count of the 997 dropped:\n%s", buf)
	}
	// The count was reported: the next passing line carries none.
	clk.t = clk.t.Add(time.Second)
	log.Warn("bad request", "i", 1001)
	if l := lines(buf); strings.Contains(l[len(l)-1], "dropped=") {
		t.Fatalf("a line after the count was reported carries one again: %s", l[len(l)-1])
	}
}

func TestMessagesHaveTheirOwnLimits(t *testing.T) {
	log, buf, _ := newTest(2, time.Hour)
	for i := 0; i < 10; i++ {
		log.Warn("flood")
	}
	log.Info("vm starting")
	log.Warn("other")
	got := buf.String()
	if strings.Count(got, "msg=flood") != 2 || !strings.Contains(got, "vm starting") || !strings.Contains(got, "msg=other") {
		t.Fatalf("one message's flood held back another's lines:\n%s", got)
	}
}

func TestFlushReportsPendingDropsOnce(t *testing.T) {
	log, buf, _ := newTest(1, time.Hour)
	log = log.With("device", "virtio-blk")
	for i := 0; i < 50; i++ {
		log.Warn("bad request")
	}
	Flush(log)
	l := lines(buf)
	if len(l) != 2 || !strings.Contains(l[1], "dropped=49") || !strings.Contains(l[1], `message="bad request"`) || !strings.Contains(l[1], "device=virtio-blk") {
		t.Fatalf("flush did not report the 49 dropped lines with the logger's attributes:\n%s", buf)
	}
	Flush(log)
	if len(lines(buf)) != 2 {
		t.Fatalf("a second flush reported the same drops again:\n%s", buf)
	}
}

func TestDerivedLoggersShareLimits(t *testing.T) {
	log, buf, _ := newTest(5, time.Hour)
	for i := 0; i < 100; i++ {
		log.With("port", i).Warn("guest overran its credit")
	}
	if n := len(lines(buf)); n != 5 {
		t.Fatalf("%d lines through 100 derived loggers, want the shared burst of 5", n)
	}
}

func TestDistinctMessagesAreBounded(t *testing.T) {
	log, buf, _ := newTest(1, time.Hour)
	h := log.Handler().(*Handler)
	for i := 0; i < 10*MaxKeys; i++ {
		log.Warn(fmt.Sprintf("message %d", i))
	}
	if n := len(h.st.keys); n > MaxKeys+1 {
		t.Fatalf("tracking %d messages, want at most %d", n, MaxKeys+1)
	}
	if n := len(lines(buf)); n > MaxKeys+1 {
		t.Fatalf("%d lines from %d distinct messages, want at most %d", n, 10*MaxKeys, MaxKeys+1)
	}
}

func TestWrapIsIdempotentAndDisabledLevelsCostNothing(t *testing.T) {
	var buf bytes.Buffer
	base := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	w := Wrap(base)
	if Wrap(w) != w {
		t.Fatal("wrapping a rate-limited logger wrapped it again")
	}
	for i := 0; i < 100; i++ {
		w.Debug("noisy") // below the level: must not spend tokens
	}
	w.Debug("noisy")
	for i := 0; i < DefaultBurst; i++ {
		w.Info("noisy")
	}
	if n := strings.Count(buf.String(), "msg=noisy"); n != DefaultBurst {
		t.Fatalf("%d info lines passed after 101 disabled debug lines, want the full burst %d", n, DefaultBurst)
	}
	Wrap(nil).Warn("goes nowhere")
}
