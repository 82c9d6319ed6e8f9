package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/agent"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/control"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// The fake VMM's snapshots: its state file holds fakeVMState, and a
// restore from any other refuses, as a real VMM refuses a state file it
// cannot read.
const fakeVMState = "fake vm state 1\n"

// failRestores, beside an image's files, fails as many restores as the
// number it holds.
const failRestores = "fail-restores"

func fakeRestore(files control.Files) error {
	state, mem := files[control.SlotRestoreState], files[control.SlotRestoreMemory]
	if state == nil || mem == nil {
		return errors.New("no snapshot files")
	}
	defer state.Close()
	defer mem.Close()
	// A test makes the next N restores of an image fail with a marker
	// beside its files that holds N (passing failures: the host's load).
	if p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", state.Fd())); err == nil {
		marker := filepath.Join(filepath.Dir(p), failRestores)
		if b, err := os.ReadFile(marker); err == nil {
			n, _ := strconv.Atoi(string(b))
			if n--; n > 0 {
				os.WriteFile(marker, []byte(strconv.Itoa(n)), 0o600)
			} else {
				os.Remove(marker)
			}
			return errors.New("fake VMM: a passing restore failure")
		}
	}
	b, err := io.ReadAll(io.LimitReader(state, 4096))
	if err != nil {
		return err
	}
	if string(b) != fakeVMState {
		return fmt.Errorf("state file %q is not a snapshot of this VMM's", b)
	}
	return nil
}

// fakeControl serves the VMM's control socket: a snapshot writes the fake
// state and some memory, and the VM carries on (or, asked to stop, ends).
// With CELLVM_TEST_FAKE_WSET set, the memory is two pages and the guest's
// working set is the second (fakeWorkingSet); without, the VMM records
// none.
func fakeControl(path string) error {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return err
	}
	wset := os.Getenv("CELLVM_TEST_FAKE_WSET") != ""
	var ws control.WorkingSetHandler
	if wset {
		ws = func() ([]snapshot.Extent, error) { return fakeWorkingSet, nil }
	}
	go control.ServeWith(ln, func(state, memory *os.File, _ control.Request) error {
		if _, err := state.WriteString(fakeVMState); err != nil {
			return err
		}
		_, err := memory.WriteString("fake guest memory")
		if err == nil && wset {
			err = memory.Truncate(2 * 4096)
		}
		return err
	}, ws, func() { os.Exit(0) }, slog.New(slog.DiscardHandler))
	return nil
}

// fakeWorkingSet is the fake guest's working set (CELLVM_TEST_FAKE_WSET).
var fakeWorkingSet = []snapshot.Extent{{Off: 4096, Len: 4096}}

// fakeNewMachine is the fake guest's reseed: nothing to do.
var fakeNewMachine = &agent.NewMachine{
	Reseed:   func([]byte) error { return nil },
	SetClock: func(time.Time) error { return nil },
}

// fakeWarm is the fake interpreter's answer to the template's imports:
// done, unless CELLVM_TEST_FAKE_WARM says "hang" (the build never ends
// by itself) or "fail" (the imports fail).
func fakeWarm(ctx context.Context) (cell.Result, error) {
	switch os.Getenv("CELLVM_TEST_FAKE_WARM") {
	case "hang":
		<-ctx.Done()
		return cell.Result{}, ctx.Err()
	case "fail":
		return cell.Result{Status: cell.StatusError, Error: &cell.Error{Name: "ModuleNotFoundError", Value: "No module named 'pandas'"}}, nil
	}
	return cell.Result{Status: cell.StatusOK}, nil
}

// newTemplateManager is a fake-VMM manager with templates on; opt
// adjusts its options.
func newTemplateManager(t *testing.T, opt func(*Options)) (*VMManager, string, *lockedBuffer) {
	t.Helper()
	return newRoleManager(t, "agent", func(o *Options) {
		o.Templates = TemplateOptions{Enabled: true, Retry: time.Hour}
		if opt != nil {
			opt(o)
		}
	})
}

// waitTemplate waits until the template of vcpus and memory reaches
// state with a key other than notKey, and returns it.
func waitTemplate(t *testing.T, m *VMManager, vcpus, memory int, state sandbox.TemplateState, notKey string) sandbox.TemplateInfo {
	t.Helper()
	return waitTemplateWhere(t, m, fmt.Sprintf("%s template of %d vCPUs and %d MiB", state, vcpus, memory), func(in sandbox.TemplateInfo) bool {
		return in.VCPUs == vcpus && in.MemoryMiB == memory && in.State == state && in.Key != notKey
	})
}

// waitTemplateWhere waits until a template for which ok holds is listed
// in Capacity (what names it, for the failure), and returns it.
func waitTemplateWhere(t *testing.T, m *VMManager, what string, ok func(sandbox.TemplateInfo) bool) sandbox.TemplateInfo {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var last []sandbox.TemplateInfo
	for time.Now().Before(deadline) {
		c, err := m.Capacity(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		last = c.Templates
		for _, in := range c.Templates {
			if ok(in) {
				return in
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %s within a minute; templates: %+v", what, last)
	return sandbox.TemplateInfo{}
}

// createFrom creates a sandbox of cfg and checks how it started, by the
// manager's account and by the fake guest's.
func createFrom(t *testing.T, m *VMManager, cfg sandbox.Config, want string) sandbox.Info {
	t.Helper()
	ctx := context.Background()
	info, err := m.Create(ctx, cfg)
	if err != nil {
		t.Fatalf("create %+v: %v", cfg, err)
	}
	t.Cleanup(func() { m.Delete(ctx, info.ID) })
	if info.StartedFrom != want {
		t.Errorf("create %+v: started_from %q, want %q", cfg, info.StartedFrom, want)
	}
	if got, err := m.Get(ctx, info.ID); err != nil || got.StartedFrom != want {
		t.Errorf("get %s: started_from %q (%v), want %q", info.ID, got.StartedFrom, err, want)
	}
	guest := "booted"
	if want != sandbox.StartedFromBoot {
		guest = "restored"
	}
	r, err := m.RunCell(ctx, info.ID, sandbox.Cell{Code: "started", Timeout: time.Minute}, nil)
	if err != nil || r.Stdout != guest {
		t.Errorf("create %+v: the guest says it %q (%v), want %q", cfg, r.Stdout, err, guest)
	}
	return info
}

// TestTemplateStartsAPlainCreate: once the default shape's template is
// ready, a plain create restores it (and so does start "template"), start
// "cold" boots, a create with env gets its env, a shape without a
// template boots and has one built for it, a fork says snapshot, and a
// bad start value is refused.
func TestTemplateStartsAPlainCreate(t *testing.T) {
	m, state, _ := newTemplateManager(t, nil)
	ctx := context.Background()
	tpl := waitTemplate(t, m, sandbox.DefaultVCPUs, sandbox.DefaultMemoryMiB, sandbox.TemplateReady, "")
	if tpl.BuiltAt == nil || tpl.SizeBytes <= 0 || tpl.Key == "" || tpl.Root {
		t.Errorf("ready template %+v: want built_at, size and key", tpl)
	}
	createFrom(t, m, sandbox.Config{}, sandbox.StartedFromTemplate)
	createFrom(t, m, sandbox.Config{Start: sandbox.StartTemplate}, sandbox.StartedFromTemplate)
	createFrom(t, m, sandbox.Config{Start: sandbox.StartCold}, sandbox.StartedFromBoot)

	withEnv := createFrom(t, m, sandbox.Config{Env: map[string]string{"TOKEN": "abc"}, TTL: time.Hour, IdleTimeout: time.Minute}, sandbox.StartedFromTemplate)
	r, err := m.RunCell(ctx, withEnv.ID, sandbox.Cell{Code: "env", Timeout: time.Minute}, nil)
	if err != nil || r.Stdout != `{"TOKEN":"abc"}` {
		t.Errorf("a template-started sandbox's env: %q (%v), want its create's", r.Stdout, err)
	}
	if withEnv.Config.TTL != time.Hour || withEnv.Config.IdleTimeout != time.Minute {
		t.Errorf("a template-started sandbox's config %+v lacks its create's TTL and idle timeout", withEnv.Config)
	}

	// Another shape: its first create boots and asks for its template.
	createFrom(t, m, sandbox.Config{VCPUs: 2}, sandbox.StartedFromBoot)
	waitTemplate(t, m, 2, sandbox.DefaultMemoryMiB, sandbox.TemplateReady, "")
	createFrom(t, m, sandbox.Config{VCPUs: 2}, sandbox.StartedFromTemplate)

	parent := createFrom(t, m, sandbox.Config{Start: sandbox.StartCold}, sandbox.StartedFromBoot)
	snap, err := m.Snapshot(ctx, parent.ID)
	if err != nil {
		t.Fatal(err)
	}
	createFrom(t, m, sandbox.Config{Snapshot: snap.ID}, sandbox.StartedFromSnapshot)
	for _, cfg := range []sandbox.Config{{Start: "warm"}, {Start: sandbox.StartCold, Snapshot: snap.ID}} {
		if _, err := m.Create(ctx, cfg); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("create %+v: %v, want ErrInvalid", cfg, err)
		}
	}

	// Template builds are no caller's sandboxes, and leave no directory.
	if l, _ := m.List(ctx); len(l) != 8 {
		t.Errorf("%d sandboxes listed, want the 8 created", len(l))
	}
	if d, _ := filepath.Glob(filepath.Join(state, "templates", templateBuildPref+"*")); len(d) != 0 {
		t.Errorf("template build directories left: %v", d)
	}
}

// TestTemplateRebuiltWhenItsFilesChange: a change to the root image makes
// the template stale: the next create boots, the template is built anew
// under a new key, the old files go, and creates restore the new one.
func TestTemplateRebuiltWhenItsFilesChange(t *testing.T) {
	var rootfs string
	m, state, _ := newTemplateManager(t, func(o *Options) { rootfs = o.RootFS })
	old := waitTemplate(t, m, sandbox.DefaultVCPUs, sandbox.DefaultMemoryMiB, sandbox.TemplateReady, "")
	createFrom(t, m, sandbox.Config{}, sandbox.StartedFromTemplate)
	if err := os.WriteFile(rootfs, []byte("a new image"), 0o600); err != nil {
		t.Fatal(err)
	}
	createFrom(t, m, sandbox.Config{}, sandbox.StartedFromBoot)
	fresh := waitTemplate(t, m, sandbox.DefaultVCPUs, sandbox.DefaultMemoryMiB, sandbox.TemplateReady, old.Key)
	createFrom(t, m, sandbox.Config{}, sandbox.StartedFromTemplate)
	dirs, _ := filepath.Glob(filepath.Join(state, "templates", "*"))
	if len(dirs) != 1 || filepath.Base(dirs[0]) != fresh.Key {
		t.Errorf("templates directory holds %v, want only the new template %s", dirs, fresh.Key)
	}
}

// TestBrokenTemplateFallsBackToBoot: a template whose restore fails does
// not fail the create: it boots, the failure is logged (once for two
// failures within the rate limit), and the template reads failed.
func TestBrokenTemplateFallsBackToBoot(t *testing.T) {
	m, state, logs := newTemplateManager(t, nil)
	tpl := waitTemplate(t, m, sandbox.DefaultVCPUs, sandbox.DefaultMemoryMiB, sandbox.TemplateReady, "")
	if err := os.WriteFile(filepath.Join(state, "templates", tpl.Key, snapStateFile), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	createFrom(t, m, sandbox.Config{}, sandbox.StartedFromBoot)
	createFrom(t, m, sandbox.Config{}, sandbox.StartedFromBoot)
	failed := waitTemplate(t, m, sandbox.DefaultVCPUs, sandbox.DefaultMemoryMiB, sandbox.TemplateFailed, "")
	if !strings.Contains(failed.Error, "not a snapshot of this VMM's") {
		t.Errorf("failed template's error %q does not say why", failed.Error)
	}
	if n := strings.Count(logs.String(), "could not start from its template"); n != 1 {
		t.Errorf("the fallback was logged %d times, want once:\n%s", n, logs.String())
	}
	if _, err := os.Stat(filepath.Join(state, "templates", tpl.Key)); !os.IsNotExist(err) {
		t.Errorf("the broken template's files are still there: %v", err)
	}
}

// TestTemplateBuildFailureBootsCold: imports that fail leave the template
// failed with the reason, and creates boot.
func TestTemplateBuildFailureBootsCold(t *testing.T) {
	t.Setenv("CELLVM_TEST_FAKE_WARM", "fail")
	m, state, _ := newTemplateManager(t, nil)
	failed := waitTemplate(t, m, sandbox.DefaultVCPUs, sandbox.DefaultMemoryMiB, sandbox.TemplateFailed, "")
	if !strings.Contains(failed.Error, "No module named 'pandas'") {
		t.Errorf("failed template's error %q does not say why", failed.Error)
	}
	createFrom(t, m, sandbox.Config{}, sandbox.StartedFromBoot)
	if d, _ := filepath.Glob(filepath.Join(state, "templates", "*")); len(d) != 0 {
		t.Errorf("a failed build left %v", d)
	}
}

// TestTemplatesBounded: with room for one template, asking for another
// shape drops the least recently used.
func TestTemplatesBounded(t *testing.T) {
	m, state, _ := newTemplateManager(t, func(o *Options) { o.Templates.MaxTemplates = 1 })
	waitTemplate(t, m, sandbox.DefaultVCPUs, sandbox.DefaultMemoryMiB, sandbox.TemplateReady, "")
	createFrom(t, m, sandbox.Config{MemoryMiB: 256}, sandbox.StartedFromBoot)
	want := waitTemplate(t, m, sandbox.DefaultVCPUs, 256, sandbox.TemplateReady, "")
	c, _ := m.Capacity(context.Background())
	if len(c.Templates) != 1 {
		t.Errorf("templates %+v, want only the 256 MiB one", c.Templates)
	}
	dirs, _ := filepath.Glob(filepath.Join(state, "templates", "*"))
	if len(dirs) != 1 || filepath.Base(dirs[0]) != want.Key {
		t.Errorf("templates directory holds %v, want only %s", dirs, want.Key)
	}
	createFrom(t, m, sandbox.Config{}, sandbox.StartedFromBoot)
}

// TestTemplatesOff: without templates every create boots and none is
// reported.
func TestTemplatesOff(t *testing.T) {
	m, state, _ := newTemplateManager(t, func(o *Options) { o.Templates.Enabled = false })
	createFrom(t, m, sandbox.Config{}, sandbox.StartedFromBoot)
	if c, _ := m.Capacity(context.Background()); len(c.Templates) != 0 {
		t.Errorf("templates reported with templates off: %+v", c.Templates)
	}
	if _, err := os.Stat(filepath.Join(state, "templates")); !os.IsNotExist(err) {
		t.Errorf("a templates directory with templates off: %v", err)
	}
}

// TestCloseWithTemplateBuildInFlight: a create while the template builds
// boots; Close cuts the build short, stops its VM and leaves no template
// files, build directory or builder goroutine; a second Close does
// nothing.
func TestCloseWithTemplateBuildInFlight(t *testing.T) {
	t.Setenv("CELLVM_TEST_FAKE_WARM", "hang")
	m, state, _ := newTemplateManager(t, nil)
	waitTemplate(t, m, sandbox.DefaultVCPUs, sandbox.DefaultMemoryMiB, sandbox.TemplateBuilding, "")
	var pids []string
	for deadline := time.Now().Add(time.Minute); len(pids) == 0 && time.Now().Before(deadline); {
		pids, _ = filepath.Glob(filepath.Join(state, "templates", templateBuildPref+"*", procFile))
		time.Sleep(20 * time.Millisecond)
	}
	if len(pids) != 1 {
		t.Fatalf("no template build VM: %v", pids)
	}
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{})
	if err != nil || info.StartedFrom != sandbox.StartedFromBoot {
		t.Fatalf("create while the template builds: %+v, %v; want a boot", info, err)
	}
	if c, _ := m.Capacity(ctx); c.Sandboxes != 1 || c.MemoryMiBUsed != 2*sandbox.DefaultMemoryMiB {
		t.Errorf("capacity %+v: want 1 sandbox, and the build's memory counted", c)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.templates.done:
	default:
		t.Error("the template builder still runs after Close")
	}
	if d, _ := filepath.Glob(filepath.Join(state, "templates", "*")); len(d) != 0 {
		t.Errorf("template files left after Close: %v", d)
	}
	assertNothingLeft(t, m, state)
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestTemplateKeptAcrossRestart: a new manager over the same state
// directory takes the ready template back without building it again; one
// whose files changed meanwhile is removed.
func TestTemplateKeptAcrossRestart(t *testing.T) {
	var o Options
	m, state, logs := newTemplateManager(t, func(opt *Options) { o = *opt })
	defer func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	}()
	tpl := waitTemplate(t, m, sandbox.DefaultVCPUs, sandbox.DefaultMemoryMiB, sandbox.TemplateReady, "")
	m.Close()
	m2, err := NewVMManager(o)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	c, _ := m2.Capacity(context.Background())
	if len(c.Templates) != 1 || c.Templates[0].State != sandbox.TemplateReady || c.Templates[0].Key != tpl.Key {
		t.Fatalf("templates after a restart: %+v, want %s ready", c.Templates, tpl.Key)
	}
	createFrom(t, m2, sandbox.Config{}, sandbox.StartedFromTemplate)
	m2.Close()

	var meta templateMeta
	b, _ := os.ReadFile(filepath.Join(state, "templates", tpl.Key, templateMetaFile))
	if err := json.Unmarshal(b, &meta); err != nil || meta.Key != tpl.Key {
		t.Fatalf("template.json: %s, %v", b, err)
	}
	if err := os.WriteFile(o.Kernel, []byte("another kernel"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CELLVM_TEST_FAKE_WARM", "hang") // the rebuild stays in flight
	m3, err := NewVMManager(o)
	if err != nil {
		t.Fatal(err)
	}
	defer m3.Close()
	if _, err := os.Stat(filepath.Join(state, "templates", tpl.Key)); !os.IsNotExist(err) {
		t.Errorf("a template whose kernel changed was kept: %v", err)
	}
}
