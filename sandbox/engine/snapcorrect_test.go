package engine

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/control"
)

// TestResumeKeepsTheUsersGenerators: a resume of a sandbox's own pause
// renews its kernel's pool and clock only, so a user's seeded generator
// carries on its sequence; a fork of it renews the generators too, so it
// does not repeat its parent's numbers.
func TestResumeKeepsTheUsersGenerators(t *testing.T) {
	m, _ := newPausableManager(t, nil)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(ctx, info.ID)
	if err := m.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Resume(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if got := cellText(t, m, info.ID, "reseeds"); got != "1" {
		t.Errorf("the resumed guest's kernel was reseeded %s times, want 1", got)
	}
	if got := cellText(t, m, info.ID, "genreseeds"); got != "0" {
		t.Errorf("a resume reseeded the user's generators %s times, want 0", got)
	}
	snap, err := m.Snapshot(ctx, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer m.DeleteSnapshot(ctx, snap.ID)
	fork, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(ctx, fork.ID)
	if got := cellText(t, m, fork.ID, "genreseeds"); got != "1" {
		t.Errorf("a fork's generators were reseeded %s times, want 1", got)
	}
}

// heldSoon waits until sandbox id holds a call (a command, a transfer).
func heldSoon(t *testing.T, m *VMManager, id string) {
	t.Helper()
	s, err := m.get(id)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !s.lc.held(); {
		if time.Now().After(deadline) {
			t.Fatal("the call never held the sandbox")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestExecOutlivesAnIdlePause: a command longer than the sandbox's
// idle_pause_s runs to its end (an idle pause would end its VMM and the
// command with it); a pause or a snapshot asked for meanwhile is ErrBusy;
// after the command the sandbox is idle and is paused.
func TestExecOutlivesAnIdlePause(t *testing.T) {
	m, _ := newPausableManager(t, nil)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64, IdlePause: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(ctx, info.ID)
	type result struct {
		r   cell.ExecResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := m.Exec(ctx, info.ID, sandbox.ExecRequest{Argv: []string{"sleep", "3500"}, Timeout: time.Minute})
		done <- result{r, err}
	}()
	heldSoon(t, m, info.ID)
	if err := m.Pause(ctx, info.ID); !errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("pause during a command: %v, want ErrBusy", err)
	}
	if _, err := m.Snapshot(ctx, info.ID); !errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("snapshot during a command: %v, want ErrBusy", err)
	}
	res := <-done
	if res.err != nil || res.r.Stdout != "slept\n" {
		t.Fatalf("a command longer than idle_pause_s: %+v, %v (an idle pause cut it)", res.r, res.err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for stateOf(t, m, info.ID) != sandbox.StatePaused {
		if time.Now().After(deadline) {
			t.Fatal("the sandbox was not paused once the command ended and it was idle")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestExecOutlivesTheIdleTimeout: a command running longer than the
// sandbox's idle timeout is use: the sandbox is not deleted under it.
func TestExecOutlivesTheIdleTimeout(t *testing.T) {
	m, _ := newPausableManager(t, nil)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64, IdleTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(ctx, info.ID)
	r, err := m.Exec(ctx, info.ID, sandbox.ExecRequest{Argv: []string{"sleep", "3500"}, Timeout: time.Minute})
	if err != nil || r.Stdout != "slept\n" {
		t.Fatalf("a command longer than idle_timeout_s: %+v, %v (the idle timeout deleted its sandbox)", r, err)
	}
	if _, err := m.Get(ctx, info.ID); err != nil {
		t.Fatalf("the sandbox after a command longer than its idle timeout: %v", err)
	}
}

// TestTransfersHoldOffPause: an upload or a download in progress holds
// off a pause as a command does.
func TestTransfersHoldOffPause(t *testing.T) {
	m, _ := newPausableManager(t, nil)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(ctx, info.ID)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	// The fake guest's files are the host's.
	dest := filepath.Join(t.TempDir(), "up")
	go func() {
		_, err := m.Upload(ctx, info.ID, dest, pr)
		done <- err
	}()
	heldSoon(t, m, info.ID)
	pw.Write([]byte("part"))
	if err := m.Pause(ctx, info.ID); !errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("pause during an upload: %v, want ErrBusy", err)
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatalf("upload: %v", err)
	}
	if err := m.Pause(ctx, info.ID); err != nil {
		t.Fatalf("pause after the upload: %v", err)
	}
}

// TestFailedResumeIsNeverResumedTwice: a resume that fails after its VMM
// started from the image (here the restored guest refuses its reseed)
// loses the sandbox: the image is used, and neither a second resume nor
// a restarted daemon starts the guest from it again.
func TestFailedResumeIsNeverResumedTwice(t *testing.T) {
	m, _ := newPausableManager(t, nil)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	cellText(t, m, info.ID, "failreseed = 1")
	if err := m.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	restores := func() int {
		b, _ := os.ReadFile(filepath.Join(m.sandboxDir(info.ID), consoleFile))
		return strings.Count(string(b), "fake guest: restored")
	}
	if err := m.Resume(ctx, info.ID); !errors.Is(err, sandbox.ErrLost) {
		t.Fatalf("a resume whose guest refused its reseed: %v, want ErrLost", err)
	}
	if st := stateOf(t, m, info.ID); st != sandbox.StateLost {
		t.Errorf("state after a resume that failed after its VM started: %s, want lost", st)
	}
	if got, _ := m.Get(ctx, info.ID); got.Lost == nil || !strings.Contains(got.Lost.Reason, "not resumed twice") {
		t.Errorf("lost info: %+v", got.Lost)
	}
	if err := m.Resume(ctx, info.ID); err == nil {
		t.Error("a second resume of a used image was accepted")
	}
	if _, err := m.RunCell(ctx, info.ID, sandbox.Cell{Code: "x", Timeout: time.Minute}, nil); !errors.Is(err, sandbox.ErrLost) {
		t.Errorf("a cell after the failed resume: %v, want ErrLost", err)
	}
	if n := restores(); n != 1 {
		t.Errorf("the guest was started from its pause image %d times, want 1", n)
	}
	if n := vmmCount(m, info.ID); n != 0 {
		t.Errorf("%d VMM processes left after the failed resume", n)
	}
	if _, err := os.Stat(filepath.Join(m.sandboxDir(info.ID), pausedDir, usedMark)); err != nil {
		t.Errorf("the image is not marked used: %v", err)
	}

	// A daemon that died mid-resume (the image marked used, no VMM left)
	// does not take the sandbox back paused on restart.
	abandon(m)
	m2, err := NewVMManager(m.opt)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if _, err := m2.Get(ctx, info.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("a sandbox whose image was used was taken back: %v", err)
	}
	if n := restores(); n > 1 {
		t.Errorf("the restarted daemon started the guest from the used image again (%d starts)", n)
	}
}

// TestResumeThatNeverRanStaysPaused: a VMM that says its machine never
// ran (its restore failed before the guest's first instruction) did not
// use the image: the sandbox stays paused, with an image not marked used.
func TestResumeThatNeverRanStaysPaused(t *testing.T) {
	m, _ := newPausableManager(t, nil)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(ctx, info.ID)
	cellText(t, m, info.ID, "failrestore = 1")
	if err := m.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := m.Resume(ctx, info.ID); err == nil || errors.Is(err, sandbox.ErrLost) || !strings.Contains(err.Error(), "stays paused") {
			t.Fatalf("a resume whose VMM never ran: %v, want an error that keeps it paused", err)
		}
		if st := stateOf(t, m, info.ID); st != sandbox.StatePaused {
			t.Fatalf("state after a resume that never ran: %s, want paused", st)
		}
	}
	if _, err := os.Stat(filepath.Join(m.sandboxDir(info.ID), pausedDir, usedMark)); err == nil {
		t.Error("an image no guest ran from is marked used")
	}
}

// TestPauseOutlivesTheDaemonsPatience: a save that takes longer than the
// daemon's patience is waited for (the VMM stops after it all the same),
// and the sandbox ends paused with its image, not lost; a delete during a
// slow pause ends the wait at once.
func TestPauseOutlivesTheDaemonsPatience(t *testing.T) {
	defer func(p time.Duration) { pausePatience = p }(pausePatience)
	pausePatience = 200 * time.Millisecond
	m, state := newPausableManager(t, nil)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	cellText(t, m, info.ID, "x = slow")
	cellText(t, m, info.ID, "slowsave = 1500")
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond) // the caller gives up too
	defer cancel()
	if err := m.Pause(pctx, info.ID); err != nil {
		t.Fatalf("a pause slower than the daemon's patience: %v", err)
	}
	if st := stateOf(t, m, info.ID); st != sandbox.StatePaused {
		t.Fatalf("state after a slow pause: %s, want paused", st)
	}
	if got := cellText(t, m, info.ID, "x"); got != "slow" {
		t.Errorf("x after a slow pause: %q", got)
	}

	cellText(t, m, info.ID, "slowsave = 20000")
	done := make(chan error, 1)
	go func() { done <- m.Pause(ctx, info.ID) }()
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	if err := m.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("a delete during a slow pause took %v", took)
	}
	if err := <-done; err == nil {
		t.Error("a pause cut short by a delete reported success")
	}
	assertNothingLeft(t, m, state)
}

// TestPauseWhoseReplyIsLostKeepsTheImage: a VMM that wrote its machine
// and stopped as asked, but whose reply never came, leaves a complete
// image (its End report says so): the sandbox is paused, not lost.
func TestPauseWhoseReplyIsLostKeepsTheImage(t *testing.T) {
	m, _ := newPausableManager(t, nil)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(ctx, info.ID)
	cellText(t, m, info.ID, "x = kept")
	cellText(t, m, info.ID, "dropreply = 1")
	if err := m.Pause(ctx, info.ID); err != nil {
		t.Fatalf("a pause whose reply was lost after a complete save: %v", err)
	}
	if st := stateOf(t, m, info.ID); st != sandbox.StatePaused {
		t.Fatalf("state: %s, want paused", st)
	}
	if got := cellText(t, m, info.ID, "x"); got != "kept" {
		t.Errorf("x after the resume: %q", got)
	}
}

// TestCompletePartialPauseSurvivesACrash: a daemon that died after its
// paused sandbox's VMM wrote the image and stopped (End: snapshot_stop),
// but before it renamed paused.partial, leaves a complete image: the next
// daemon takes the sandbox back paused from it.
func TestCompletePartialPauseSurvivesACrash(t *testing.T) {
	m, _ := newPausableManager(t, nil)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	cellText(t, m, info.ID, "x = partial")
	if err := m.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	dir := m.sandboxDir(info.ID)
	// What the crash left: the image not yet renamed, and the VMM's End
	// report of a save that completed.
	if err := os.Rename(filepath.Join(dir, pausedDir), filepath.Join(dir, pausedDir+partialSuffix)); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, endFile))
	if err != nil {
		t.Fatal(err)
	}
	control.WriteEnd(f, control.End{Reason: control.ReasonSnapshotStop})
	f.Close()
	abandon(m)
	m2, err := NewVMManager(m.opt)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if st := stateOf(t, m2, info.ID); st != sandbox.StatePaused {
		t.Fatalf("a sandbox whose complete pause image was not yet renamed was taken back %s, want paused", st)
	}
	if got := cellText(t, m2, info.ID, "x"); got != "partial" {
		t.Errorf("x after the restart: %q", got)
	}
}

// TestTemplateKeptAcrossATransientRestoreError: a restore of a template
// that fails once, with its files intact, is tried again and the create
// starts from the template; one that fails twice boots, and the template
// is kept for the next create, not thrown away (every create would boot
// cold until its rebuild, under the very load that made it fail).
func TestTemplateKeptAcrossATransientRestoreError(t *testing.T) {
	m, state, _ := newTemplateManager(t, nil)
	tpl := waitTemplate(t, m, sandbox.DefaultVCPUs, sandbox.DefaultMemoryMiB, sandbox.TemplateReady, "")
	dir := filepath.Join(state, "templates", tpl.Key)
	failNext := func(n int) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, failRestores), []byte(strconv.Itoa(n)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	failNext(1)
	createFrom(t, m, sandbox.Config{}, sandbox.StartedFromTemplate)

	// Twice in a row: this create boots, the template stays.
	failNext(2)
	createFrom(t, m, sandbox.Config{}, sandbox.StartedFromBoot)
	if _, err := os.Stat(filepath.Join(dir, failRestores)); err == nil {
		t.Error("the create did not try the template twice")
	}
	waitTemplate(t, m, sandbox.DefaultVCPUs, sandbox.DefaultMemoryMiB, sandbox.TemplateReady, "")
	if _, err := os.Stat(filepath.Join(dir, snapMemFile)); err != nil {
		t.Fatalf("the template's files went after passing failures: %v", err)
	}
	createFrom(t, m, sandbox.Config{}, sandbox.StartedFromTemplate)
}

// TestAdoptedForkIsReseeded: a daemon that died while a fork restored
// (its reseed still pending) leaves it to the next, which reseeds it when
// it takes it back (generators too); a resumed sandbox in the same spot
// gets its kernel reseeded only; one whose reseed was done is left alone.
func TestAdoptedForkIsReseeded(t *testing.T) {
	m, _ := newPausableManager(t, nil)
	ctx := context.Background()
	parent, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := m.Snapshot(ctx, parent.ID)
	if err != nil {
		t.Fatal(err)
	}
	fork, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	done, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Pause(ctx, parent.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Resume(ctx, parent.ID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{fork.ID, done.ID, parent.ID} {
		if _, err := os.Stat(filepath.Join(m.sandboxDir(id), reseedPendingFile)); err == nil {
			t.Errorf("sandbox %s: its reseed is done, yet marked pending", id)
		}
	}
	// What a daemon killed between the VMM's start and the reseed leaves.
	os.WriteFile(filepath.Join(m.sandboxDir(fork.ID), reseedPendingFile), []byte("all"), 0o600)
	os.WriteFile(filepath.Join(m.sandboxDir(parent.ID), reseedPendingFile), []byte("kernel"), 0o600)
	abandon(m)
	m2, err := NewVMManager(m.opt)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, id := range []string{parent.ID, fork.ID, done.ID} {
			m2.Delete(ctx, id)
		}
		m2.Close()
	}()
	for _, c := range []struct{ id, reseeds, gen string }{
		{fork.ID, "2", "2"},   // a fork's reseed at create, and the adopted one's
		{done.ID, "1", "1"},   // its own only
		{parent.ID, "2", "0"}, // two resumes: the kernel only
	} {
		if got := cellText(t, m2, c.id, "reseeds"); got != c.reseeds {
			t.Errorf("sandbox %s taken back: kernel reseeded %s times, want %s", c.id, got, c.reseeds)
		}
		if got := cellText(t, m2, c.id, "genreseeds"); got != c.gen {
			t.Errorf("sandbox %s taken back: generators reseeded %s times, want %s", c.id, got, c.gen)
		}
		if _, err := os.Stat(filepath.Join(m2.sandboxDir(c.id), reseedPendingFile)); err == nil {
			t.Errorf("sandbox %s: the reseed is still marked pending", c.id)
		}
	}
}
