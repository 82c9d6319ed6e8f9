package engine

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// logFields is one slog text line's key=value pairs (a quoted value keeps
// its spaces).
func logFields(line string) map[string]string {
	out := map[string]string{}
	for line != "" {
		line = strings.TrimLeft(line, " ")
		k, rest, ok := strings.Cut(line, "=")
		if !ok {
			break
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			// slog quotes as Go does: a value may hold \" and \n.
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				break
			}
			v, _ = strconv.Unquote(q)
			line = rest[len(q):]
		} else {
			v, line, _ = strings.Cut(rest, " ")
		}
		if _, seen := out[k]; !seen {
			out[k] = v
		}
	}
	return out
}

// checkFirstPops reads sandbox id's VMM log and checks each VMM run's
// "first queue pop" line (one per run: a resume appends a run to the
// log): it follows that run's "vmm jailed" line, and says the jail's uid
// (not 0) and seccomp mode 2. It fails unless there are want of them.
func checkFirstPops(t *testing.T, m *VMManager, id, what string, want int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.sandboxDir(id), vmmLogFile))
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	jailedUID, pops := "", 0
	for _, l := range strings.Split(string(b), "\n") {
		f := logFields(l)
		switch f["msg"] {
		case "vmm jailed":
			jailedUID = f["uid"]
		case "first queue pop":
			pops++
			if jailedUID == "" || jailedUID == "0" {
				t.Errorf("%s: the first queue pop came before the VMM was jailed: %q", what, l)
			}
			if f["uid"] != jailedUID || f["uid"] == "0" || f["seccomp"] != "2" {
				t.Errorf("%s: first queue pop with uid %s and seccomp %s, want the jail's uid %s and seccomp 2: %q", what, f["uid"], f["seccomp"], jailedUID, l)
			}
			jailedUID = "" // the next run must be jailed again
		}
	}
	if pops != want {
		t.Errorf("%s: %d first queue pop lines in the VMM log, want %d:\n%s", what, pops, want, b)
	}
}

// checkPooled checks that sandbox id's VMM came from the VMM pool
// (vmmpool.go) and runs in its VM's cgroup, not the pool's.
func checkPooled(t *testing.T, m *VMManager, id, what string) {
	t.Helper()
	s := sandboxOf(t, m, id)
	s.netMu.Lock()
	p := s.proc
	s.netMu.Unlock()
	if !p.pooled {
		t.Errorf("%s: its VMM (pid %d) did not come from the pool", what, p.pid)
	}
	if s.cgroup == nil {
		return
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/cgroup")
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(b)), "/"+filepath.Base(s.cgroup.Path)) {
		t.Errorf("%s: its VMM's cgroup is %q (%v), want its VM's %s", what, b, err, s.cgroup.Path)
	}
}

// TestFirstQueuePopIsJailed: on every restore path (a template start, a
// fork of a snapshot, a resume of a paused sandbox) the VMM's first queue
// pop, the first moment it parses a ring the guest controls, comes after
// its jail and says the jail's uid and seccomp mode 2 (issue 25: the
// devices used to start in Restore, as root, before the jail). Every VMM
// here comes from the VMM pool, as the daemon's do by default: a process
// started ahead of its spec is jailed as one started for it.
func TestFirstQueuePopIsJailed(t *testing.T) {
	if rigJail() == nil {
		t.Skip("the jail needs root")
	}
	m := newRigManagerWith(t, func(o *Options) { o.Templates, o.VMMPool = TemplateOptions{Enabled: true}, 1 })
	ctx := context.Background()
	for deadline := time.Now().Add(8 * time.Minute); ; time.Sleep(time.Second) {
		c, err := m.Capacity(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Templates) == 1 && c.Templates[0].State == sandbox.TemplateReady {
			break
		}
		if len(c.Templates) == 1 && c.Templates[0].State == sandbox.TemplateFailed || time.Now().After(deadline) {
			t.Fatalf("the default template did not become ready: %+v", c.Templates)
		}
	}
	waitPoolReady(t, m, 1)
	info, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if info.StartedFrom != sandbox.StartedFromTemplate {
		t.Fatalf("started_from %q, want %q", info.StartedFrom, sandbox.StartedFromTemplate)
	}
	if got := mainText(t, m, info.ID, "x = 6 * 7\nx"); got != "42" {
		t.Fatalf("template start: %s", got)
	}
	checkFirstPops(t, m, info.ID, "template start", 1)
	checkPooled(t, m, info.ID, "template start")

	snap, err := m.Snapshot(ctx, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	waitPoolReady(t, m, 1)
	fork, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got := mainText(t, m, fork.ID, "x"); got != "42" {
		t.Fatalf("fork: %s", got)
	}
	checkFirstPops(t, m, fork.ID, "fork", 1)
	checkPooled(t, m, fork.ID, "fork")

	if err := m.Pause(ctx, fork.ID); err != nil {
		t.Fatal(err)
	}
	waitPoolReady(t, m, 1)
	if err := m.Resume(ctx, fork.ID); err != nil {
		t.Fatal(err)
	}
	if got := mainText(t, m, fork.ID, "x"); got != "42" {
		t.Fatalf("resume: %s", got)
	}
	checkFirstPops(t, m, fork.ID, "fork, then pause and resume", 2)
	checkPooled(t, m, fork.ID, "resume")
	if i := poolInfo(t, m); i.Claimed < 3 || i.DiedIdle != 0 || i.SpawnFailures != 0 {
		t.Errorf("the pool after three pooled starts: %+v", i)
	}
}
