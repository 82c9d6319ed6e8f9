package pid1

import (
	"testing"
	"time"
)

func TestCrashWindowBacksOffAndGivesUp(t *testing.T) {
	var w crashWindow
	t0 := time.Unix(1000, 0)
	for i := 1; i < maxCrashes; i++ {
		delay, tooMany := w.add(t0.Add(time.Duration(i) * time.Second))
		if tooMany {
			t.Fatalf("crash %d: gave up before %d crashes", i, maxCrashes)
		}
		if want := time.Duration(i) * crashBackoff; delay != want {
			t.Errorf("crash %d: delay %v, want %v (grows with recent crashes)", i, delay, want)
		}
	}
	if _, tooMany := w.add(t0.Add(maxCrashes * time.Second)); !tooMany {
		t.Fatalf("%d crashes within %v: did not give up", maxCrashes, crashWindowSpan)
	}
}

func TestCrashWindowForgetsOldCrashes(t *testing.T) {
	var w crashWindow
	t0 := time.Unix(1000, 0)
	// One crash every 7 s never reaches maxCrashes within a minute.
	for i := 0; i < 5*maxCrashes; i++ {
		delay, tooMany := w.add(t0.Add(time.Duration(i) * 7 * time.Second))
		if tooMany {
			t.Fatalf("crash %d: gave up on crashes spread over %v", i, time.Duration(i)*7*time.Second)
		}
		if delay > maxCrashes*crashBackoff {
			t.Fatalf("crash %d: delay %v keeps growing", i, delay)
		}
	}
}
