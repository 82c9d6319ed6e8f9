package audit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func line(sb string) string {
	return fmt.Sprintf(`{"time":"2026-01-01T00:00:00Z","action":"x","sandbox":%q}`+"\n", sb)
}

func readString(s string, f Filter) ([]string, error) {
	var got []string
	err := Read(strings.NewReader(s), f, func(r Record) error { got = append(got, r.Sandbox); return nil })
	return got, err
}

func TestReadSkipsOnlyATornLastLine(t *testing.T) {
	whole := line("a") + line("b") + line("c")
	for name, c := range map[string]struct {
		text string
		want string
		bad  int
	}{
		"whole":                {whole, "a b c", 0},
		"torn last":            {whole + `{"time":"2026-01-01T00:00:00Z","act`, "a b c", 0},
		"torn at a char":       {whole + `{`, "a b c", 0},
		"unterminated but ok":  {whole + strings.TrimSuffix(line("d"), "\n"), "a b c d", 0},
		"invalid last, ended":  {whole + "\x00\x00\x00\n", "a b c", 0},
		"bad middle":           {line("a") + "not json\n" + line("b") + `{"no":"action"}` + "\n" + line("c"), "a b c", 2},
		"bad middle, torn end": {line("a") + "garbage\n" + line("b") + `{"ti`, "a b", 1},
		"empty":                {"", "", 0},
		"long line":            {line("a") + `{"action":"` + strings.Repeat("z", MaxLineBytes+10) + `"}` + "\n" + line("b"), "a b", 1},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := readString(c.text, Filter{})
			if strings.Join(got, " ") != c.want {
				t.Errorf("read %q, want %q", got, c.want)
			}
			var bl *BadLinesError
			switch {
			case c.bad == 0 && err != nil:
				t.Errorf("error %v", err)
			case c.bad > 0 && (!errors.As(err, &bl) || bl.Count != c.bad):
				t.Errorf("error %v, want %d bad lines", err, c.bad)
			}
		})
	}
	// fn's error stops the read.
	stop := errors.New("stop")
	n := 0
	err := Read(strings.NewReader(whole), Filter{}, func(Record) error { n++; return stop })
	if err != stop || n != 1 {
		t.Errorf("fn's error: %v after %d", err, n)
	}
}

func TestFilter(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var s strings.Builder
	for i, r := range []struct{ tenant, sb string }{{"alpha", "s1"}, {"beta", "s2"}, {"alpha", "s2"}, {"alpha", "s1"}} {
		fmt.Fprintf(&s, `{"time":%q,"action":"x","tenant":%q,"sandbox":%q}`+"\n", t0.Add(time.Duration(i)*time.Hour).Format(time.RFC3339), r.tenant, r.sb)
	}
	for _, c := range []struct {
		f    Filter
		want int
	}{{Filter{}, 4}, {Filter{Tenant: "alpha"}, 3}, {Filter{Sandbox: "s2"}, 2}, {Filter{Tenant: "alpha", Sandbox: "s1"}, 2},
		{Filter{Since: t0.Add(2 * time.Hour)}, 2}, {Filter{Tenant: "gamma"}, 0}} {
		got, err := readString(s.String(), c.f)
		if err != nil || len(got) != c.want {
			t.Errorf("%+v: %d records (%v), want %d", c.f, len(got), err, c.want)
		}
	}
}

// TestKilledWriterLeavesReadableLog kills a process writing records in a
// loop with SIGKILL, then appends a torn line as a crash mid-line would
// leave: the reader gets every whole record and no error.
func TestKilledWriterLeavesReadableLog(t *testing.T) {
	if path := os.Getenv("AUDIT_TEST_WRITER"); path != "" {
		l, err := Open(path, Options{MaxBytes: 1 << 30, FullCode: true, MaxCodeBytes: MaxCodeBytesLimit})
		if err != nil {
			os.Exit(3)
		}
		for i := 0; ; i++ {
			r := Record{Action: "POST /v1/sandboxes/{id}/cells", Sandbox: fmt.Sprint(i)}
			r.SetCode(strings.Repeat("c", 1000+i%100000))
			if err := l.Write(r); err != nil {
				os.Exit(4)
			}
		}
	}
	path := t.TempDir() + "/audit.jsonl"
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledWriterLeavesReadableLog$")
	cmd.Env = append(os.Environ(), "AUDIT_TEST_WRITER="+path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if fi, err := os.Stat(path); err == nil && fi.Size() > 4<<20 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("the writer wrote nothing")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	err := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the writer ended with %v, not SIGKILL", err)
	}
	check := func(what string) int {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		n := 0
		err = Read(f, Filter{}, func(r Record) error {
			if r.Sandbox != fmt.Sprint(n) || int64(len(r.Code)) != r.CodeBytes {
				return fmt.Errorf("record %d: sandbox %s, code %d of %d bytes", n, r.Sandbox, len(r.Code), r.CodeBytes)
			}
			n++
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return n
	}
	n := check("after SIGKILL")
	if n == 0 {
		t.Fatal("no records")
	}
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"time":"2026-01-01T00:00:00Z","action":"POST /v1/sandboxes/{id}/cells","sandbox":"` + fmt.Sprint(n) + `","code":"ccc`)
	f.Close()
	if m := check("with a torn last line"); m != n {
		t.Errorf("%d records with the torn line, %d without", m, n)
	}
}

func TestFollowAcrossRotation(t *testing.T) {
	defer func(p time.Duration) { followPoll = p }(followPoll)
	followPoll = 5 * time.Millisecond
	l, path := openTest(t, Options{MaxBytes: 4096, Keep: 2})
	for i := 0; i < 5; i++ {
		l.Write(Record{Action: "x", Sandbox: fmt.Sprint(i), Tenant: "alpha"})
	}
	var mu sync.Mutex
	var got []string
	var bad []error
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Follow(ctx, path, Filter{Tenant: "alpha"}, func(r Record) error {
			mu.Lock()
			got = append(got, r.Sandbox)
			mu.Unlock()
			return nil
		}, func(err error) { mu.Lock(); bad = append(bad, err); mu.Unlock() })
	}()
	waitFor := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); count() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("follower has %d records, want %d", count(), n)
			}
		}
	}
	waitFor(5)
	// Records of another tenant, a bad line and a torn end interleave
	// with rotation.
	want := 5
	for i := 5; i < 200; i++ {
		l.Write(Record{Action: "x", Sandbox: fmt.Sprint(i), Tenant: "alpha"})
		l.Write(Record{Action: "x", Sandbox: "other", Tenant: "beta"})
		want++
		if i == 50 {
			f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			f.WriteString("not a record\n")
			f.Close()
		}
		if i%8 == 0 {
			waitFor(want) // never two rotations within one poll
		}
	}
	waitFor(want)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, s := range got {
		if s != fmt.Sprint(i) {
			t.Fatalf("record %d is %s: %v", i, s, got)
		}
	}
	if len(bad) != 1 || !strings.Contains(bad[0].Error(), "not JSON") {
		t.Errorf("bad lines reported: %v", bad)
	}
	if len(Files(path)) != 3 {
		t.Errorf("files %v", Files(path))
	}
}

func TestFollowWaitsForTheFileAndDropsATornEnd(t *testing.T) {
	defer func(p time.Duration) { followPoll = p }(followPoll)
	followPoll = 5 * time.Millisecond
	path := t.TempDir() + "/audit.jsonl"
	got := make(chan string, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Follow(ctx, path, Filter{}, func(r Record) error { got <- r.Sandbox; return nil }, nil)
	time.Sleep(20 * time.Millisecond)
	os.WriteFile(path, []byte(line("a")+`{"time":"2026-01-01T00:00:00Z","action":"x","sand`), 0o600)
	if s := <-got; s != "a" {
		t.Fatalf("first %s", s)
	}
	// The rest of the held line arrives: it is whole now.
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`box":"b"}` + "\n")
	// A torn line, then the file is replaced: the torn part is dropped.
	f.WriteString(`{"time":"2026-01-01T00:00:00Z","act`)
	f.Close()
	if s := <-got; s != "b" {
		t.Fatalf("second %s", s)
	}
	time.Sleep(20 * time.Millisecond)
	os.WriteFile(path+".tmp", []byte(line("c")), 0o600)
	os.Rename(path+".tmp", path)
	select {
	case s := <-got:
		if s != "c" {
			t.Fatalf("after the replacement: %s", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the new file was not followed")
	}
}
