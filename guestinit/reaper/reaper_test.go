package reaper

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMain makes the test process a child subreaper, so orphans of its
// children are re-parented to it as they would be to PID 1 in the guest.
// Nothing else in this test binary starts processes, so the reaper is the
// only waiter, as it is in the guest's PID 1.
func TestMain(m *testing.M) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		panic("PR_SET_CHILD_SUBREAPER: " + err.Error())
	}
	os.Exit(m.Run())
}

func needSh(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("needs /bin/sh")
	}
}

// children returns this process's child pids and which of them are zombies.
func children(t *testing.T) (all, zombies []int) {
	t.Helper()
	self := os.Getpid()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == self {
			all = append(all, pid)
			if f[0] == "Z" {
				zombies = append(zombies, pid)
			}
		}
	}
	return all, zombies
}

func start(t *testing.T, r *Reaper, script string) (int, <-chan Exit) {
	t.Helper()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	pid, ch, err := r.Start("/bin/sh", []string{"sh", "-c", script}, &os.ProcAttr{Files: []*os.File{devnull, devnull, devnull}})
	if err != nil {
		t.Fatal(err)
	}
	return pid, ch
}

func waitExit(t *testing.T, ch <-chan Exit) Exit {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no exit status within 10s")
		return Exit{}
	}
}

func TestRegisteredChildGetsItsStatusAndOrphansAreReaped(t *testing.T) {
	needSh(t)
	r := New(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)

	// The shell leaves three background sleeps behind: they are re-parented
	// to this process and must be reaped when they end.
	pid, ch := start(t, r, "sleep 0.2 & sleep 0.3 & sleep 0.2 & exit 7")
	e := waitExit(t, ch)
	if e.Pid != pid || e.Code() != 7 || e.Status.Signaled() {
		t.Fatalf("exit = %v (code %d), want pid %d code 7", e, e.Code(), pid)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		all, zombies := children(t)
		if len(all) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("children left: %v, zombies: %v", all, zombies)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := r.Orphans(); n != 3 {
		t.Fatalf("Orphans() = %d, want 3", n)
	}
}

func TestSignalledChild(t *testing.T) {
	needSh(t)
	r := New(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	pid, ch := start(t, r, "exec sleep 30")
	time.Sleep(50 * time.Millisecond)
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e := waitExit(t, ch)
	if !e.Status.Signaled() || e.Status.Signal() != unix.SIGKILL || e.Code() != 128+9 {
		t.Fatalf("exit = %v, want killed by SIGKILL", e)
	}
}

// TestManyChildrenNoneLost starts children that exit at once, while the
// reaper runs, so registration races exits; every waiter must still get
// its own status.
func TestManyChildrenNoneLost(t *testing.T) {
	needSh(t)
	r := New(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code := i % 50
			pid, ch := start(t, r, "(sleep 0.05 &) ; exit "+strconv.Itoa(code))
			if e := waitExit(t, ch); e.Pid != pid || e.Code() != code {
				t.Errorf("child %d: exit %v code %d, want pid %d code %d", i, e, e.Code(), pid, code)
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		all, _ := children(t)
		if len(all) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, p := range all {
				b, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
				t.Logf("left: %s", b)
			}
			t.Fatalf("children left: %v", all)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := r.Orphans(); n != 40 {
		t.Errorf("Orphans() = %d, want 40", n)
	}
}
