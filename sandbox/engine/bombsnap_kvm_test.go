package engine

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// TestSnapshotAfterBombs: a sandbox that has survived a Bash fork bomb and
// a JavaScript memory bomb can still be snapshotted, and its fork has the
// sessions' variables. (In TestLanguages' first form, such a snapshot
// ended with the VMM's control socket closing.)
func TestSnapshotAfterBombs(t *testing.T) {
	m := newRigManager(t)
	ctx := context.Background()
	sb, err := m.Create(ctx, sandbox.Config{VCPUs: 1, MemoryMiB: 512})
	if err != nil {
		t.Fatal(err)
	}
	run := func(id string, lang cell.Language, code string, timeout time.Duration) cell.Result {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, timeout+2*time.Minute)
		defer cancel()
		start := time.Now()
		r, err := m.RunCell(cctx, id, sandbox.Cell{Session: sandbox.Session{Language: lang}, Code: code, Timeout: timeout}, nil)
		if err != nil {
			t.Fatalf("%s cell %q: %v", lang, code, err)
		}
		t.Logf("%s cell %.40q: %s (killed_by %q, state_kept %v) in %v", lang, code, r.Status, r.KilledBy, r.StateKept, time.Since(start).Round(time.Millisecond))
		return r
	}
	main := func(r cell.Result) string {
		if m := r.MainResult(); m != nil {
			return m.Data["text/plain"]
		}
		return ""
	}
	run(sb.ID, cell.JavaScript, "var keep = 41", 3*time.Minute)
	run(sb.ID, cell.Python, "kept = 'py'", 3*time.Minute)
	run(sb.ID, cell.Bash, ":(){ :|:& };:", 20*time.Second)
	if err := m.Restart(ctx, sb.ID, sandbox.Session{Language: cell.Bash}); err != nil {
		t.Fatalf("restart bash after the fork bomb: %v", err)
	}
	if r := run(sb.ID, cell.JavaScript, "const hog = []; while (true) hog.push(new Array(1 << 20).fill(1.5))", 3*time.Minute); r.Status == cell.StatusOK {
		t.Fatalf("memory bomb ended ok: %+v", r)
	}
	if r := run(sb.ID, cell.JavaScript, "6 * 7", 3*time.Minute); main(r) != "42" {
		t.Fatalf("after the memory bomb: %+v", r)
	}
	snap, err := m.Snapshot(ctx, sb.ID)
	if err != nil {
		out, _ := exec.Command("dmesg").CombinedOutput()
		if len(out) > 4096 {
			out = out[len(out)-4096:]
		}
		t.Fatalf("snapshot after the bombs: %v\nhost dmesg (end):\n%s", err, out)
	}
	fork, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID})
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	if got := main(run(fork.ID, cell.Python, "kept", 3*time.Minute)); got != "'py'" {
		t.Fatalf("fork's python kept = %q", got)
	}
	if got := main(run(sb.ID, cell.Python, "kept", 3*time.Minute)); got != "'py'" {
		t.Fatalf("parent's python kept = %q", got)
	}
}
