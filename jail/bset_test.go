package jail

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// envBoundingChild makes the test binary boundingChild.
const envBoundingChild = "CELLVM_JAIL_TEST_BSET"

// boundingChild is the test binary as a pooled VMM process: it has a few
// threads of its own when it empties its bounding set (DropBoundingSet),
// makes one more thread after, prints every thread's capability sets,
// then drops the rest of its privileges (Drop) and prints them again.
func boundingChild(specJSON string) int {
	s, ok := childSpec(specJSON)
	if !ok {
		return 3
	}
	hold := make(chan struct{})
	defer close(hold)
	lockedThread := func() {
		started := make(chan struct{})
		go func() {
			runtime.LockOSThread() // never unlocked: the thread stays this goroutine's
			close(started)
			<-hold
		}()
		<-started
	}
	for range 4 {
		lockedThread()
	}
	if err := DropBoundingSet(); err != nil {
		fmt.Println("child: bounding set:", err)
		return 3
	}
	lockedThread() // made after: it inherits the empty set
	if err := DropBoundingSet(); err != nil {
		fmt.Println("child: bounding set, again:", err)
		return 3
	}
	printThreads("pooled")
	if err := Drop(s); err != nil {
		fmt.Println("child: drop:", err)
		return 3
	}
	printThreads("dropped")
	return 0
}

// printThreads prints "WHEN TID CapBnd CapEff" for each of the process's
// threads.
func printThreads(when string) {
	tasks, _ := filepath.Glob("/proc/self/task/*/status")
	for _, st := range tasks {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		f := map[string]string{}
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok {
				f[k] = strings.TrimSpace(v)
			}
		}
		fmt.Println(when, filepath.Base(filepath.Dir(st)), f["CapBnd"], f["CapEff"])
	}
}

// TestDropBoundingSetEveryThread: DropBoundingSet, which a pooled VMM
// process runs while it waits for its claim, empties the bounding set of
// every thread, those made before it and after, and leaves the effective
// set (Enter, after it, still mounts); Drop, after it, still ends with
// every set empty.
func TestDropBoundingSetEveryThread(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: PR_CAPBSET_DROP, setuid")
	}
	if !AllThreads() {
		t.Skip("this test binary was built with cgo (CGO_ENABLED=1, e.g. for -race); the jail needs a binary without it, as make test builds")
	}
	b, _ := json.Marshal(Spec{Root: "/nonexistent", UID: 200_000_124, GID: 200_000_124, Limits: Rlimits{NoFile: 64, NProc: 64, FSize: 1 << 20}})
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), envBoundingChild+"="+string(b))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	seen := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) != 4 {
			t.Fatalf("child printed %q\n%s", l, out)
		}
		when, tid, bnd, eff := f[0], f[1], f[2], f[3]
		seen[when]++
		if bnd != "0000000000000000" {
			t.Errorf("%s: thread %s has bounding set %s, want empty", when, tid, bnd)
		}
		switch {
		case when == "pooled" && eff == "0000000000000000":
			t.Errorf("pooled: thread %s lost its effective capabilities (Enter needs them)", tid)
		case when == "dropped" && eff != "0000000000000000":
			t.Errorf("dropped: thread %s kept effective capabilities %s", tid, eff)
		}
	}
	// Four locked threads before, one after, and the runtime's own.
	if seen["pooled"] < 6 || seen["dropped"] < 6 {
		t.Errorf("threads seen %v, want at least 6 at each step\n%s", seen, out)
	}
}
