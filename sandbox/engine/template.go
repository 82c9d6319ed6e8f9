package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/jail"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/egress"
	"github.com/cellvm/cellvm/vmm/control"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// Templates are warm starts. Most of a cold sandbox's wait for its first
// result is Python importing numpy, pandas and matplotlib, not the boot.
// A template is a snapshot (snapshot.go) of a VM that booted, started its
// interpreter and imported them; a plain create of the same machine shape
// (vCPUs, memory, root) restores it as a fork does, with fresh entropy,
// the host's clock and reseeded generators, and is up with the imports
// done.
//
// The templates type owns the state directory's templates/: one directory
// per template, named by its key, which hashes the shape and the identity
// (device, inode, size, mtime, ctime) of the VMM binary, the kernel, the
// initramfs and the shape's root image, so that a change to any of them
// (an image rebuilt by `cellvm image build` is a new file) makes the
// template stale; templates are per image; and the directory of the VM a build runs (build-<id>).
// One goroutine builds templates, one at a time, in the background, only
// for shapes that were asked for: the default shape from the start, any
// other after its first create. Their number and disk use are bounded
// (the least recently used go first).
//
// A create never fails for a template: none ready, a stale one, or a
// restore that fails (the template is marked failed, the failure logged,
// rate-limited) all boot the sandbox instead. Sandboxes with a network
// policy always boot: a fork would keep the template's network setup.
// A create's env reaches a template-started guest as a booted one's does:
// the agent sets it and starts a fresh interpreter to see it, so such a
// sandbox is up as fast but its first cell imports what it needs itself.

// TemplateOptions configure templates.
type TemplateOptions struct {
	Enabled bool
	// MaxTemplates bounds the templates kept, one per shape (default 4).
	MaxTemplates int
	// MaxBytes bounds their disk use (default 8 GiB).
	MaxBytes int64
	// RetryMin is how long after a first failure a template is built
	// again (default 5 s); each further failure in a row doubles it, up
	// to Retry (default 2 min). A build fails mostly for the host's load
	// at the daemon's start (a burst of creates booting beside it), so
	// the next try comes soon; a template that keeps failing costs a
	// build every Retry at most.
	RetryMin time.Duration
	Retry    time.Duration
	// BuildTimeout bounds one build (default 10 min).
	BuildTimeout time.Duration
	// Resident is how the templates' memory files are kept resident
	// (resident.go; default off), and ResidentBytes the most lock mode
	// locks.
	Resident      ResidentMode
	ResidentBytes int64
}

// templateWarmCode is the cell a template's interpreter runs before its
// snapshot: the imports land in sys.modules without binding a name in
// the user's namespace, which stays as a booted sandbox's.
//
// Then it collects and freezes the heap (gc.freeze, Python 3.7+): every
// object alive at the snapshot, the data stack's 90,000 or so, moves to
// the permanent generation, which the cyclic collector never walks.
// Without it the interpreter of each sandbox started from the template
// soon ran a full collection over all of them (the imports leave the
// collector's counts near a full one): a walk that reads and writes
// every object's header, so it faulted in, and copied from the shared
// memory file, most of the heap's pages in the first cells (the
// template's first cell took 300-700 ms in the rig against a fork's
// 190-310). Frozen objects are still freed by their reference counts.
const templateWarmCode = `exec("for m in ('numpy', 'pandas', 'matplotlib', 'matplotlib.pyplot'): __import__(m)\n` + templateFreeze + `", {})`

// templateWarmAnyCode is the same cell for an image other than the
// default (pulled, imported or built on another base): it imports those
// of the data stack the image has, and nothing else (a python:slim image
// has none of them, and its template is still a warm interpreter).
const templateWarmAnyCode = `exec("import importlib.util\nfor m in ('numpy', 'pandas', 'matplotlib', 'matplotlib.pyplot'):\n    if importlib.util.find_spec(m.split('.')[0]) is not None: __import__(m)\n` + templateFreeze + `", {})`

// templateFreeze is the warm cells' last lines, inside their exec's
// string literal (so its \n are Python's escapes): collect, then freeze
// what is left (templateWarmCode).
const templateFreeze = `import gc\ngc.collect()\ngc.freeze()`

// noInterpreter says whether r is the result of a cell in an image with
// no usable python3 (guestinit/interp's InterpreterNotFound and
// InterpreterTooOld): such an image's template is a booted machine
// without an interpreter, which still saves its boot.
func noInterpreter(r cell.Result) bool {
	return r.Status == cell.StatusError && r.Error != nil &&
		(r.Error.Name == "InterpreterNotFound" || r.Error.Name == "InterpreterTooOld")
}

const (
	templateMetaFile  = "template.json"
	templateBuildPref = "build-"
	// templateLogEvery rate-limits the log of creates that booted
	// because their template failed.
	templateLogEvery = time.Minute
)

// templateShape is the machine a template is for.
type templateShape struct {
	VCPUs     int  `json:"vcpus"`
	MemoryMiB int  `json:"memory_mib"`
	Root      bool `json:"root"`
	// Image is the root image booted ("" for the default): templates are
	// per image, since the snapshot's memory caches its files.
	Image string `json:"image,omitempty"`
}

func shapeOf(cfg sandbox.Config) templateShape {
	sh := templateShape{VCPUs: cfg.VCPUs, MemoryMiB: cfg.MemoryMiB, Root: cfg.Root, Image: cfg.Image}
	if isDefaultImage(sh.Image) {
		sh.Image = ""
	}
	return sh
}

// templateMeta is template.json.
type templateMeta struct {
	Key       string        `json:"key"`
	Shape     templateShape `json:"shape"`
	BuiltAt   time.Time     `json:"built_at"`
	SizeBytes int64         `json:"size_bytes"`
	// Files is what verify checks the files against when a restore
	// fails: their sizes, and the small state file's CRC-32C (the memory
	// file is too large to hash on that path). None: an older template,
	// which fails verification.
	Files *templateFiles `json:"files,omitempty"`
}

// templateFiles is a template's files as they were written.
type templateFiles struct {
	StateBytes  int64  `json:"state_bytes"`
	StateCRC32C uint32 `json:"state_crc32c"`
	MemoryBytes int64  `json:"memory_bytes"`
}

// maxTemplateState bounds the state file verify reads (vCPU and device
// state: kilobytes).
const maxTemplateState = 64 << 20

// sumTemplateFiles reads the files of the template in dir.
func sumTemplateFiles(dir string) (templateFiles, error) {
	var tf templateFiles
	b, err := readBounded(filepath.Join(dir, snapStateFile), maxTemplateState)
	if err != nil {
		return tf, err
	}
	fi, err := os.Stat(filepath.Join(dir, snapMemFile))
	if err != nil {
		return tf, err
	}
	tf.StateBytes, tf.StateCRC32C, tf.MemoryBytes = int64(len(b)), crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)), fi.Size()
	return tf, nil
}

// template is one shape's entry. Its state says what its fields mean:
// ready: key, builtAt and size are its files', readyAfter when they became
// ready (since the manager's start; 0 for files found at the start);
// building: key is what is being built; failed: err and failedAt say why
// and when. failures counts the failures in a row (retryDelay).
type template struct {
	shape      templateShape
	state      sandbox.TemplateState
	key        string
	builtAt    time.Time
	size       int64
	err        string
	failedAt   time.Time
	failures   int
	readyAfter time.Duration
	lastUsed   time.Time
	// prefetch is the recorded working set of the build whose key is
	// prefetchKey, read once (prefetchLocked).
	prefetch    []snapshot.Extent
	prefetchKey string
}

// retryDelay is how long after its last failure a template that failed n
// times in a row is built again: RetryMin, doubling, capped at Retry.
func (o TemplateOptions) retryDelay(n int) time.Duration {
	d := o.RetryMin
	for i := 1; i < n && d < o.Retry; i++ {
		if d > o.Retry/2 {
			return o.Retry
		}
		d *= 2
	}
	return min(d, o.Retry)
}

// failLocked marks t failed now, for why, one failure more in a row.
func (t *template) failLocked(why string, now time.Time) {
	t.state, t.err, t.failedAt = sandbox.TemplateFailed, why, now
	t.failures++
}

// templateUse is a create restoring from a ready template.
type templateUse struct {
	t      *template
	key    string
	source restoreSource
}

// templateHost is what the template builder needs of the engine, and all
// it sees of it: the files a template is made from, and a VM no caller
// sees, to boot, warm and snapshot.
type templateHost interface {
	// templateInputs names the files a template of image is made from
	// (the VMM's binary, the kernel, the initrd, the root image): a
	// change to any of them makes its templates stale.
	templateInputs(image string) ([]string, error)
	// bootTemplateVM boots an internal VM of cfg (counted in no caller's
	// list, never a template's user).
	bootTemplateVM(ctx context.Context, cfg sandbox.Config) (templateVM, error)
	// recordWorkingSet restores the snapshot in dir as an internal VM of
	// cfg, runs a first cell, and answers the pages its guest touched
	// (templatewset.go).
	recordWorkingSet(ctx context.Context, cfg sandbox.Config, dir string) ([]snapshot.Extent, error)
}

// templateVM is a booted template VM.
type templateVM interface {
	bootMS() int64
	runCell(ctx context.Context, code string, timeout time.Duration) (cell.Result, error)
	// snapshot saves the VM into dir and lets it run on.
	snapshot(ctx context.Context, dir string) error
	// destroy removes the VM and everything it had.
	destroy()
}

type templates struct {
	host templateHost
	opt  TemplateOptions
	dir  string
	log  *slog.Logger

	mu      sync.Mutex
	byShape map[templateShape]*template
	// lastLog and unlogged rate-limit the fallback log.
	lastLog  time.Time
	unlogged int
	// started is the manager's start, which readyAfter counts from.
	started time.Time
	// res keeps ready templates' memory resident (resident.go).
	res *residency

	wake      chan struct{}
	ctx       context.Context
	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

// newTemplates takes over the state directory's templates/ (keeping the
// templates still current, removing the rest and any build an earlier
// daemon left) and asks for the default shape's template; start starts
// the builder.
func newTemplates(host templateHost, opt TemplateOptions, stateDir string, log *slog.Logger) *templates {
	if opt.MaxTemplates <= 0 {
		opt.MaxTemplates = 4
	}
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = 8 << 30
	}
	if opt.RetryMin <= 0 {
		opt.RetryMin = 5 * time.Second
	}
	if opt.Retry <= 0 {
		opt.Retry = 2 * time.Minute
	}
	opt.RetryMin = min(opt.RetryMin, opt.Retry)
	if opt.BuildTimeout <= 0 {
		opt.BuildTimeout = 10 * time.Minute
	}
	ts := &templates{
		host: host, opt: opt, dir: filepath.Join(stateDir, "templates"), log: log,
		byShape: map[templateShape]*template{}, wake: make(chan struct{}, 1), done: make(chan struct{}),
		started: time.Now(), res: newResidency(opt.Resident, opt.ResidentBytes, log),
	}
	ts.ctx, ts.cancel = context.WithCancel(context.Background())
	if err := os.MkdirAll(ts.dir, 0o700); err != nil {
		ts.log.Error("templates directory; sandboxes will boot cold", "error", err)
	}
	ts.load()
	ts.mu.Lock()
	ts.wantLocked(shapeOf(sandbox.Config{}.WithDefaults()), time.Now())
	ts.mu.Unlock()
	return ts
}

// start starts the builder, once the manager holds ts.
func (ts *templates) start() { go ts.run() }

func (ts *templates) templateDir(key string) string { return filepath.Join(ts.dir, key) }

func (ts *templates) buildDir(id string) string { return filepath.Join(ts.dir, templateBuildPref+id) }

// key is the key of shape's template over the current guest files.
func (ts *templates) key(shape templateShape) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "cellvm template 1\n%d %d %t\n", shape.VCPUs, shape.MemoryMiB, shape.Root)
	inputs, err := ts.host.templateInputs(shape.Image)
	if err != nil {
		return "", fmt.Errorf("template key: %w", err)
	}
	for _, p := range inputs {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			return "", fmt.Errorf("template key: %s: %w", p, err)
		}
		fmt.Fprintf(h, "%s %d %d %d %d.%d %d.%d\n", p, st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// load takes stock of templates/ at start.
func (ts *templates) load() {
	ents, _ := os.ReadDir(ts.dir)
	for _, e := range ents {
		p := filepath.Join(ts.dir, e.Name())
		if strings.HasPrefix(e.Name(), templateBuildPref) {
			ts.log.Warn("removing a template build an earlier daemon left", "dir", p)
			stopLeftVM(p)
			os.RemoveAll(p)
			continue
		}
		var meta templateMeta
		b, err := os.ReadFile(filepath.Join(p, templateMetaFile))
		if err == nil {
			err = json.Unmarshal(b, &meta)
		}
		if err == nil {
			var key string
			if key, err = ts.key(meta.Shape); err == nil && (key != meta.Key || e.Name() != key) {
				err = errors.New("its guest files changed")
			}
		}
		if err == nil && len(ts.byShape) >= ts.opt.MaxTemplates {
			err = errors.New("more templates than the cap")
		}
		if err != nil {
			ts.log.Info("removing a template", "dir", p, "reason", err)
			os.RemoveAll(p)
			continue
		}
		ts.byShape[meta.Shape] = &template{shape: meta.Shape, state: sandbox.TemplateReady, key: meta.Key,
			builtAt: meta.BuiltAt, size: meta.SizeBytes, lastUsed: meta.BuiltAt}
		ts.res.keep(meta.Key, filepath.Join(p, snapMemFile))
	}
}

// stopLeftVM stops the VMM a build of an earlier daemon left in dir and
// removes its cgroup.
func stopLeftVM(dir string) {
	if p, err := adoptVM(dir); err == nil {
		p.stop(3 * time.Second)
	}
	if spec, err := control.ReadSpec(filepath.Join(dir, specFile)); err == nil && spec.Jail != nil && spec.Jail.Cgroup != "" {
		jail.CgroupAt(spec.Jail.Cgroup).Close()
	}
}

// use returns the ready template a create of cfg restores, or nil: the
// create boots. It records the shape's demand, and a stale template is
// dropped for a rebuild.
func (ts *templates) use(cfg sandbox.Config, policy egress.Policy) *templateUse {
	if ts == nil || cfg.Start == sandbox.StartCold || !policy.Empty() || cfg.Workspace != "" {
		// A template's machine has no NIC and no workspace disk.
		return nil
	}
	shape := shapeOf(cfg)
	key, keyErr := ts.key(shape)
	now := time.Now()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.byShape[shape]
	if t == nil {
		ts.wantLocked(shape, now)
		return nil
	}
	t.lastUsed = now
	if t.state != sandbox.TemplateReady {
		return nil
	}
	if keyErr != nil || key != t.key {
		ts.log.Info("template out of date (the guest files changed); building it anew", "template", t.key, "shape", shape)
		ts.dropFilesLocked(t)
		t.state = sandbox.TemplatePending
		ts.kick()
		return nil
	}
	return &templateUse{t: t, key: key, source: restoreSource{
		dir: ts.templateDir(key), name: "template " + key, startedFrom: sandbox.StartedFromTemplate,
		prefetch: ts.prefetchLocked(t)}}
}

// verify checks u's template's files against what its build wrote
// (templateMeta.Files): a restore that failed with files that verify
// failed for a passing reason (the host's load, a slow disk), and the
// template is kept.
func (ts *templates) verify(u *templateUse) error {
	dir := ts.templateDir(u.key)
	b, err := readBounded(filepath.Join(dir, templateMetaFile), 1<<20)
	if err != nil {
		return err
	}
	var meta templateMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		return fmt.Errorf("%s: %w", templateMetaFile, err)
	}
	if meta.Key != u.key || meta.Files == nil {
		return fmt.Errorf("%s is not this template's, or from an older cellvm", templateMetaFile)
	}
	got, err := sumTemplateFiles(dir)
	if err != nil {
		return err
	}
	if got != *meta.Files {
		return fmt.Errorf("its files changed since its build: %+v, built %+v", got, *meta.Files)
	}
	// The state file is as built; the memory file must still match the
	// digest the save put in its header (a flipped page keeps the size).
	return verifyImageDir(dir)
}

// failedOnce records that a create could not start from u's template
// twice although its files verify: the create boots, and the template
// stays for the next.
func (ts *templates) failedOnce(u *templateUse, err error) {
	now := time.Now()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if now.Sub(ts.lastLog) < templateLogEvery {
		ts.unlogged++
		return
	}
	ts.log.Warn("a sandbox could not start from its template, whose files verify; it boots and the template is kept", "template", u.key,
		"shape", u.t.shape, "error", clip(err.Error(), 2048), "earlier_failures_not_logged", ts.unlogged)
	ts.lastLog, ts.unlogged = now, 0
}

// broken records that a create could not start from u's template (it
// then boots) and its files failed verification: the template is failed
// until its next build.
func (ts *templates) broken(u *templateUse, err error) {
	now := time.Now()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if t := ts.byShape[u.t.shape]; t == u.t && t.state == sandbox.TemplateReady && t.key == u.key {
		ts.dropFilesLocked(t)
		t.failLocked(clip("restore: "+err.Error(), 2048), now)
	}
	if now.Sub(ts.lastLog) < templateLogEvery {
		ts.unlogged++
		return
	}
	ts.log.Warn("a sandbox could not start from its template and boots instead", "template", u.key,
		"shape", u.t.shape, "error", clip(err.Error(), 2048), "earlier_failures_not_logged", ts.unlogged)
	ts.lastLog, ts.unlogged = now, 0
}

// wantLocked records demand for shape's template, making room within the
// cap by dropping the least recently used one that is not building.
func (ts *templates) wantLocked(shape templateShape, now time.Time) {
	if _, ok := ts.byShape[shape]; ok {
		return
	}
	if len(ts.byShape) >= ts.opt.MaxTemplates {
		var lru *template
		for _, t := range ts.byShape {
			if t.state != sandbox.TemplateBuilding && (lru == nil || t.lastUsed.Before(lru.lastUsed)) {
				lru = t
			}
		}
		if lru == nil {
			return
		}
		ts.removeLocked(lru)
	}
	ts.byShape[shape] = &template{shape: shape, state: sandbox.TemplatePending, lastUsed: now}
	ts.kick()
}

// dropImage drops the templates of a deleted image (one being built
// fails with it and is dropped at its next use).
func (ts *templates) dropImage(name string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, t := range ts.byShape {
		if t.shape.Image == name && t.state != sandbox.TemplateBuilding {
			ts.removeLocked(t)
		}
	}
}

// removeLocked drops a template and its files.
func (ts *templates) removeLocked(t *template) {
	ts.dropFilesLocked(t)
	delete(ts.byShape, t.shape)
	ts.log.Info("template dropped", "shape", t.shape, "key", t.key)
}

func (ts *templates) dropFilesLocked(t *template) {
	if t.state == sandbox.TemplateReady && t.key != "" {
		ts.res.drop(t.key)
		if err := os.RemoveAll(ts.templateDir(t.key)); err != nil {
			ts.log.Error("remove a template's files", "key", t.key, "error", err)
		}
	}
}

func (ts *templates) kick() {
	select {
	case ts.wake <- struct{}{}:
	default:
	}
}

// run is the builder: one template at a time, until Close. It looks
// again when asked (kick), when a failed one's retry is due, and every
// minute (for files that went stale).
func (ts *templates) run() {
	defer close(ts.done)
	for {
		t, key, due := ts.next()
		if t != nil {
			ts.build(t, key)
			continue
		}
		ts.refreshResident(time.Now())
		wait := time.Minute
		if !due.IsZero() {
			wait = min(wait, max(0, time.Until(due)))
		}
		timer := time.NewTimer(wait)
		select {
		case <-ts.ctx.Done():
			timer.Stop()
			return
		case <-ts.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// next picks the template to build now, if any, and marks it building:
// one asked for and not built, one whose files went stale, or one that
// failed long enough ago (retryDelay). Otherwise due is when the soonest
// failed one may be built again (zero: none failed).
func (ts *templates) next() (_ *template, _ string, due time.Time) {
	if ts.ctx.Err() != nil {
		return nil, "", due
	}
	now := time.Now()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	all := make([]*template, 0, len(ts.byShape))
	for _, t := range ts.byShape {
		all = append(all, t)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].lastUsed.After(all[j].lastUsed) })
	for _, t := range all {
		key, err := ts.key(t.shape)
		switch t.state {
		case sandbox.TemplateReady:
			if err != nil || key == t.key {
				continue
			}
			ts.dropFilesLocked(t)
		case sandbox.TemplateFailed:
			if at := t.failedAt.Add(ts.opt.retryDelay(t.failures)); now.Before(at) {
				if due.IsZero() || at.Before(due) {
					due = at
				}
				continue
			}
		case sandbox.TemplateBuilding:
			continue
		}
		if err != nil {
			t.failLocked(err.Error(), now)
			if at := now.Add(ts.opt.retryDelay(t.failures)); due.IsZero() || at.Before(due) {
				due = at
			}
			continue
		}
		t.state, t.key, t.err = sandbox.TemplateBuilding, key, ""
		return t, key, time.Time{}
	}
	return nil, "", due
}

// build builds t's template under key.
func (ts *templates) build(t *template, key string) {
	ctx, cancel := context.WithTimeout(ts.ctx, ts.opt.BuildTimeout)
	defer cancel()
	start := time.Now()
	ts.log.Info("building a template", "shape", t.shape, "key", key)
	tmp := ts.templateDir(key) + partialSuffix
	meta, err := ts.buildFiles(ctx, t.shape, key, tmp)
	if err == nil {
		// The build's VM is gone: the recording restore does not
		// stand beside it. A template without a record is still one.
		if werr := ts.recordWorkingSet(ctx, t.shape, tmp); werr != nil && ts.ctx.Err() == nil {
			ts.log.Warn("template working set not recorded; its restores fault their pages in as the guest reaches them",
				"shape", t.shape, "error", clip(werr.Error(), 2048))
		}
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if err == nil {
		err = renameDurable(tmp, ts.templateDir(key))
	}
	if err != nil {
		os.RemoveAll(tmp)
		if ts.ctx.Err() != nil {
			return // shutting down
		}
		t.failLocked(clip(err.Error(), 2048), time.Now())
		ts.log.Warn("template build failed; sandboxes of its shape boot cold", "shape", t.shape, "error", t.err,
			"failures", t.failures, "retry_in", ts.opt.retryDelay(t.failures))
		return
	}
	trustImage(ts.templateDir(key))
	t.state, t.builtAt, t.size, t.failures = sandbox.TemplateReady, meta.BuiltAt, meta.SizeBytes, 0
	t.readyAfter = time.Since(ts.started)
	ts.log.Info("template ready", "shape", t.shape, "key", key, "size_bytes", t.size, "took_ms", time.Since(start).Milliseconds(),
		"ready_after_ms", t.readyAfter.Milliseconds())
	ts.boundBytesLocked(t)
	if t.state == sandbox.TemplateReady {
		// Under ts.mu, so that no drop of its files comes between: a
		// lock of a large file holds up creates for its read, once.
		ts.res.keep(key, filepath.Join(ts.templateDir(key), snapMemFile))
	}
}

// refreshResident asks again for the ready templates' memory files to be
// read into the page cache, when cache mode's refresh is due.
func (ts *templates) refreshResident(now time.Time) {
	if !ts.res.due(now) {
		return
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, t := range ts.byShape {
		if t.state == sandbox.TemplateReady {
			ts.res.keep(t.key, filepath.Join(ts.templateDir(t.key), snapMemFile))
		}
	}
}

// lockedBytes is the memory locked for templates (Capacity).
func (ts *templates) lockedBytes() int64 {
	if ts == nil {
		return 0
	}
	return ts.res.lockedBytes()
}

// buildFiles boots a VM of shape, imports the data stack in its
// interpreter, and snapshots it into dir; the VM is then removed.
func (ts *templates) buildFiles(ctx context.Context, shape templateShape, key, dir string) (templateMeta, error) {
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return templateMeta{}, fmt.Errorf("template directory: %w", err)
	}
	cfg := sandbox.Config{VCPUs: shape.VCPUs, MemoryMiB: shape.MemoryMiB, Root: shape.Root, Image: shape.Image}
	vm, err := ts.host.bootTemplateVM(ctx, cfg)
	if err != nil {
		return templateMeta{}, fmt.Errorf("boot the template's VM: %w", err)
	}
	defer vm.destroy()
	ts.log.Info("template VM booted; importing the data stack", "shape", shape, "boot_ms", vm.bootMS())
	imports := time.Now()
	warm := templateWarmCode
	if !isDefaultImage(shape.Image) {
		warm = templateWarmAnyCode
	}
	r, err := vm.runCell(ctx, warm, ts.opt.BuildTimeout)
	if err == nil && noInterpreter(r) {
		ts.log.Info("template VM's image has no usable python3; its template is the booted machine", "shape", shape)
	} else if err == nil && r.Status != cell.StatusOK {
		err = fmt.Errorf("status %s: %s", r.Status, cellError(r))
	}
	if err != nil {
		return templateMeta{}, fmt.Errorf("import numpy, pandas and matplotlib in the template's VM: %w", err)
	}
	ts.log.Info("template VM imported the data stack; taking its snapshot", "shape", shape, "import_ms", time.Since(imports).Milliseconds())
	if err := vm.snapshot(ctx, dir); err != nil {
		return templateMeta{}, fmt.Errorf("snapshot the template's VM: %w", err)
	}
	meta := templateMeta{Key: key, Shape: shape, BuiltAt: time.Now().UTC(),
		SizeBytes: diskUsage(filepath.Join(dir, snapStateFile)) + diskUsage(filepath.Join(dir, snapMemFile))}
	files, err := sumTemplateFiles(dir)
	if err != nil {
		return templateMeta{}, fmt.Errorf("template files: %w", err)
	}
	meta.Files = &files
	b, err := json.MarshalIndent(meta, "", "  ")
	if err == nil {
		err = writeFileSync(filepath.Join(dir, templateMetaFile), b, 0o600)
	}
	if err != nil {
		return templateMeta{}, fmt.Errorf("template metadata: %w", err)
	}
	return meta, nil
}

func cellError(r cell.Result) string {
	if r.Error != nil {
		return clip(r.Error.Name+": "+r.Error.Value, 512)
	}
	return clip(r.Stderr, 512)
}

// boundBytesLocked keeps the templates' disk use within the cap, dropping
// the least recently used others first; a template over the cap by itself
// fails.
func (ts *templates) boundBytesLocked(keep *template) {
	for {
		var total int64
		var lru *template
		for _, t := range ts.byShape {
			if t.state != sandbox.TemplateReady {
				continue
			}
			total += t.size
			if t != keep && (lru == nil || t.lastUsed.Before(lru.lastUsed)) {
				lru = t
			}
		}
		if total <= ts.opt.MaxBytes {
			return
		}
		if lru == nil {
			ts.dropFilesLocked(keep)
			// Its next build would be as large: it waits the longest.
			keep.failLocked(fmt.Sprintf("the template takes %d bytes, more than the cap of %d", keep.size, ts.opt.MaxBytes), time.Now())
			keep.failures = max(keep.failures, 64)
			ts.log.Warn("template over the disk cap", "shape", keep.shape, "size_bytes", keep.size, "cap_bytes", ts.opt.MaxBytes)
			return
		}
		ts.removeLocked(lru)
	}
}

// list reports the templates, for Capacity.
func (ts *templates) list() []sandbox.TemplateInfo {
	if ts == nil {
		return nil
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	out := make([]sandbox.TemplateInfo, 0, len(ts.byShape))
	for _, t := range ts.byShape {
		in := sandbox.TemplateInfo{VCPUs: t.shape.VCPUs, MemoryMiB: t.shape.MemoryMiB, Root: t.shape.Root, Image: t.shape.Image,
			State: t.state, Key: t.key, Error: t.err}
		if in.Image == "" {
			in.Image = sandbox.DefaultImage
		}
		switch t.state {
		case sandbox.TemplateReady:
			at, after := t.builtAt, t.readyAfter.Milliseconds()
			in.BuiltAt, in.SizeBytes, in.ReadyAfterMS = &at, t.size, &after
		case sandbox.TemplateFailed:
			in.Failures = t.failures
			in.RetryInMS = max(0, time.Until(t.failedAt.Add(ts.opt.retryDelay(t.failures))).Milliseconds())
		}
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.VCPUs != b.VCPUs {
			return a.VCPUs < b.VCPUs
		}
		if a.MemoryMiB != b.MemoryMiB {
			return a.MemoryMiB < b.MemoryMiB
		}
		return !a.Root && b.Root
	})
	return out
}

// Close stops the builder and waits for it: a build in flight is cut
// short, its VM and partial files removed. Ready templates stay on disk
// for the next daemon. Idempotent.
func (ts *templates) Close() {
	if ts == nil {
		return
	}
	ts.closeOnce.Do(func() {
		ts.cancel()
		<-ts.done
		ts.res.close()
	})
}
