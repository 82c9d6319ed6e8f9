// Package sandbox is the internal API that every cellvm front end (the HTTP
// API, the CLI, the MCP server, the agent loop) feeds. The front ends only
// translate; the Manager does the work. Keeping the contract here, as a Go
// interface plus plain types, lets each front end be tested against a fake
// manager with no VM, and lets the API's Go client satisfy the same
// interface, so a caller can swap an in-process manager for a remote daemon.
//
// This package is the contract only: the Manager interface, its types,
// limits, validation, sentinel errors, events and observation types, and
// the image and workspace name rules. It imports nothing of cellvm but
// cell/ and its own egress/ (the allowlist's syntax), so a front end that
// links it links no VMM, KVM, device, jail or host-network code. The
// engine that runs sandboxes in microVMs is package sandbox/engine; the
// one test double is package sandbox/sandboxtest.
package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox/egress"
)

// Sentinel errors. Managers wrap them with context
// (fmt.Errorf("%w: memory_mib 70000 above 65536", ErrInvalid)); front ends
// map them to status codes with errors.Is. The HTTP mapping is in package api.
var (
	// ErrNotFound: no sandbox with that id, or no such file in the guest.
	ErrNotFound = errors.New("not found")
	// ErrInvalid: the request is malformed or out of bounds.
	ErrInvalid = errors.New("invalid request")
	// ErrFull: the host's cap on sandboxes or on memory is reached. Retrying
	// after other sandboxes are deleted can succeed.
	ErrFull = errors.New("host capacity reached")
	// ErrBusy: the sandbox is doing something that excludes the request.
	// In particular a cell is already running: a second cell on the same
	// sandbox is refused with ErrBusy, not queued, because a queued cell
	// would run against state the caller has not seen yet and its timeout
	// would silently include the wait. Also returned for a request that
	// does not fit the sandbox's state (running a cell while paused).
	ErrBusy = errors.New("sandbox busy")
	// ErrLost: the sandbox's VM died; the sandbox can only be deleted.
	ErrLost = errors.New("sandbox lost")
	// ErrNotSupported: this manager or host does not offer the operation.
	ErrNotSupported = errors.New("not supported")
	// ErrTooLarge: a body or file is larger than the limit allows.
	ErrTooLarge = errors.New("too large")
	// ErrQuota: the caller's tenant is at one of its caps (sandboxes,
	// vCPUs, memory, disk, creates per minute). The error names the cap;
	// one that frees up with time says when (RetryAfter).
	ErrQuota = errors.New("tenant quota reached")
	// ErrForbidden: the caller may see the object but not do this to it
	// (a tenant deleting the operator's image).
	ErrForbidden = errors.New("forbidden")
	// ErrUpstream: a server the request named (an image registry) could
	// not be reached or refused; the error names it and what it said.
	ErrUpstream = errors.New("upstream failed")
	// ErrBuildFailed: an image's build ran and one of its steps failed
	// (ImageStepError names it, with the end of its output); the image
	// there was before is unchanged.
	ErrBuildFailed = errors.New("image build failed")
	// ErrQueueFull: every slot for starting a VM is taken and the line
	// of starts waiting for one is full (a burst of creates, resumes or
	// forks beyond what the host's CPUs boot at once). It is an ErrFull
	// (503 with Retry-After): the error says when to retry (RetryAfter).
	// ErrBusy is not used for it: that is 409, about one sandbox's state.
	ErrQueueFull = fmt.Errorf("%w: VM start queue full", ErrFull)
)

// RetryAfter returns how long err says to wait before retrying, when it
// says (an error with a RetryAfter() time.Duration method in its chain).
func RetryAfter(err error) (time.Duration, bool) {
	var ra interface{ RetryAfter() time.Duration }
	if errors.As(err, &ra) {
		return ra.RetryAfter(), true
	}
	return 0, false
}

// QueueFullError is the refusal of a VM start (a create, a fork, a
// resume) that found every slot taken and the line of starts waiting for
// one full: an ErrQueueFull that says when to retry. It says nothing of
// the starts under way: they may be other tenants'.
type QueueFullError struct {
	// Retry is when a start is likely to be admitted soon.
	Retry time.Duration
}

func (e *QueueFullError) Error() string {
	return fmt.Sprintf("%v: every slot to start a VM is taken and the line waiting for one is full; retry after %ds",
		ErrQueueFull, int((e.Retry+time.Second-1)/time.Second))
}

func (e *QueueFullError) Unwrap() error             { return ErrQueueFull }
func (e *QueueFullError) RetryAfter() time.Duration { return e.Retry }

// Limits on requests. They bound what a caller can make the daemon hold in
// memory or ask of a guest.
const (
	MinVCPUs     = 1
	MaxVCPUs     = 32
	MinMemoryMiB = 64
	MaxMemoryMiB = 65536

	DefaultVCPUs     = 1
	DefaultMemoryMiB = 512

	MaxEnvVars       = 256
	MaxEnvKeyBytes   = 256
	MaxEnvValueBytes = 32 << 10
	MaxEnvTotalBytes = 256 << 10

	// MaxTTL bounds ttl_s, idle_timeout_s and idle_pause_s (30 days).
	MaxTTL = 30 * 24 * time.Hour

	MaxAllowEntries    = 256
	MaxAllowEntryBytes = 253

	MaxCodeBytes    = 1 << 20
	MaxArgs         = 4096
	MaxArgBytes     = 128 << 10
	MaxArgvBytes    = 1 << 20
	MaxStdinBytes   = 1 << 20
	MaxGuestPathLen = 4096
)

// NetworkPolicy is a sandbox's egress allowlist. With no entries the
// sandbox has no network device at all.
type NetworkPolicy struct {
	// Allow holds IP addresses ("1.2.3.4"), CIDR prefixes ("10.0.0.0/8")
	// and DNS names ("pypi.org", "*.github.com").
	Allow []string `json:"allow"`
}

// Validate checks the entries' count, size and syntax with the same
// parser the host's network policy uses (egress.Parse), so what passes
// here is exactly what the host can enforce.
func (p NetworkPolicy) Validate() error {
	if len(p.Allow) > MaxAllowEntries {
		return fmt.Errorf("%w: network.allow has %d entries, at most %d", ErrInvalid, len(p.Allow), MaxAllowEntries)
	}
	for i, e := range p.Allow {
		if len(e) > MaxAllowEntryBytes+6 {
			return fmt.Errorf("%w: network.allow[%d] is longer than %d bytes", ErrInvalid, i, MaxAllowEntryBytes+6)
		}
	}
	if _, err := egress.Parse(p.Allow); err != nil {
		return fmt.Errorf("%w: network: %v", ErrInvalid, err)
	}
	return nil
}

// Config is what a caller asks for when creating a sandbox. Zero VCPUs and
// MemoryMiB mean the defaults (see WithDefaults). A zero TTL or
// IdleTimeout means the manager's default (see WithLifetimes), and Never
// means none; a created sandbox's Config holds what applies, never zero.
//
// Its JSON form is {vcpus, memory_mib, env, ttl_s, idle_timeout_s,
// idle_pause_s, root, network: {allow}, snapshot, start, workspace, image,
// tenant} with whole seconds; ttl_s and idle_timeout_s absent are the
// manager's default, and 0 is Never (lifetimes.go). Decoding it is strict: an
// unknown field is an error, because a misspelt limit ("memory_mb") that
// was silently ignored would create a sandbox the caller did not ask for.
type Config struct {
	VCPUs       int
	MemoryMiB   int
	Env         map[string]string
	TTL         time.Duration
	IdleTimeout time.Duration
	// IdlePause, when set, pauses the sandbox to disk once it has been
	// idle that long (its memory goes back to the host; the next call
	// resumes it). TTL and IdleTimeout still apply to a paused sandbox.
	IdlePause time.Duration
	// Network nil means no network device.
	Network *NetworkPolicy
	// Root runs cells and commands as root in the guest, for users who
	// need to change the system (apt). Off by default: code runs as an
	// unprivileged user. Either way the user code's cgroup bounds its
	// memory and processes, and PID 1 and the agent are shielded from the
	// OOM killer; only as root can code signal them or change its limits.
	Root bool
	// Snapshot, when set, makes the sandbox a fork of that snapshot
	// (Manager.Snapshot): its memory, and so its interpreter's variables,
	// start as the snapshot's. VCPUs and MemoryMiB are then the
	// snapshot's (zero, or the same values), and so is Root (true only
	// for a snapshot of a root sandbox).
	Snapshot string
	// Start says how a sandbox without Snapshot starts: StartDefault
	// ("") or StartTemplate restore the daemon's template for the
	// sandbox's machine when one is ready and the sandbox can use it
	// (see template.go), and boot otherwise; StartCold always boots.
	Start string
	// Workspace, when set, mounts the named persistent volume at
	// /workspace instead of a directory of the sandbox's own layer (see
	// workspace.go): it is made on first use and outlives the sandbox,
	// and only one sandbox at a time holds it.
	Workspace string
	// Image names the root image the sandbox boots (image.go): "" or
	// DefaultImage for the daemon's own, or one under its images
	// directory. A fork has its snapshot's.
	Image string
	// Tenant owns the sandbox (tenant.go; "" reads as DefaultTenant). A
	// front end serving tenants sets it from the caller, whatever the
	// request said; its workspace is the tenant's of that name.
	Tenant string
	// Labels are the caller's key=value metadata (labels.go; E2B's
	// metadata): kept with the sandbox, shown by Info, and matched by
	// ListFilter.
	Labels map[string]string
	// Checkpoints, when set, turns time travel on (checkpoints.go).
	Checkpoints *CheckpointConfig
	// Checkpoint, when set, makes the sandbox a branch of another
	// sandbox's kept checkpoint, as Snapshot makes it a fork of a
	// snapshot; the two exclude each other and Start.
	Checkpoint *CheckpointRef
}

// Config.Start's values.
const (
	StartDefault  = ""
	StartTemplate = "template"
	StartCold     = "cold"
)

// Info.StartedFrom's values: how the sandbox's VM started.
const (
	StartedFromTemplate = "template"
	StartedFromBoot     = "boot"
	StartedFromSnapshot = "snapshot"
)

// configJSON is Config's wire form. ttl_s and idle_timeout_s are
// pointers so that absent (the manager's default) and 0 (never) differ.
type configJSON struct {
	VCPUs        int               `json:"vcpus"`
	MemoryMiB    int               `json:"memory_mib"`
	Env          map[string]string `json:"env,omitempty"`
	TTLS         *int64            `json:"ttl_s,omitempty"`
	IdleTimeoutS *int64            `json:"idle_timeout_s,omitempty"`
	IdlePauseS   int64             `json:"idle_pause_s,omitempty"`
	Network      *NetworkPolicy    `json:"network,omitempty"`
	Root         bool              `json:"root,omitempty"`
	Snapshot     string            `json:"snapshot,omitempty"`
	Start        string            `json:"start,omitempty"`
	Workspace    string            `json:"workspace,omitempty"`
	Image        string            `json:"image,omitempty"`
	Tenant       string            `json:"tenant,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Checkpoints  *CheckpointConfig `json:"checkpoints,omitempty"`
	Checkpoint   *CheckpointRef    `json:"checkpoint,omitempty"`
}

// MarshalJSON writes the wire form; durations are rounded down to seconds
// (a TTL or IdleTimeout under a second is written as 1 s, so that it never
// reads back as never).
func (c Config) MarshalJSON() ([]byte, error) {
	return json.Marshal(configJSON{
		VCPUs:        c.VCPUs,
		MemoryMiB:    c.MemoryMiB,
		Env:          c.Env,
		TTLS:         lifetimeToWire(c.TTL),
		IdleTimeoutS: lifetimeToWire(c.IdleTimeout),
		IdlePauseS:   int64(c.IdlePause / time.Second),
		Network:      c.Network,
		Root:         c.Root,
		Snapshot:     c.Snapshot,
		Start:        c.Start,
		Workspace:    c.Workspace,
		Image:        c.Image,
		Tenant:       c.Tenant,
		Labels:       c.Labels,
		Checkpoints:  c.Checkpoints,
		Checkpoint:   c.Checkpoint,
	})
}

// UnmarshalJSON reads the wire form, rejecting unknown fields. Durations
// out of range are left for Validate to report, clamped so they cannot
// overflow into a valid value.
func (c *Config) UnmarshalJSON(b []byte) error {
	var w configJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return err
	}
	*c = Config{
		VCPUs:       w.VCPUs,
		MemoryMiB:   w.MemoryMiB,
		Env:         w.Env,
		TTL:         lifetimeFromWire(w.TTLS),
		IdleTimeout: lifetimeFromWire(w.IdleTimeoutS),
		IdlePause:   secondsToDuration(w.IdlePauseS),
		Network:     w.Network,
		Root:        w.Root,
		Snapshot:    w.Snapshot,
		Start:       w.Start,
		Workspace:   w.Workspace,
		Image:       w.Image,
		Tenant:      w.Tenant,
		Labels:      w.Labels,
		Checkpoints: w.Checkpoints,
		Checkpoint:  w.Checkpoint,
	}
	return nil
}

func secondsToDuration(s int64) time.Duration {
	const limit = int64(MaxTTL/time.Second) + 1
	switch {
	case s > limit:
		s = limit
	case s < -limit:
		s = -limit
	}
	return time.Duration(s) * time.Second
}

// WithDefaults returns c with zero VCPUs and MemoryMiB replaced by the
// defaults.
func (c Config) WithDefaults() Config {
	if c.VCPUs == 0 {
		c.VCPUs = DefaultVCPUs
	}
	if c.MemoryMiB == 0 {
		c.MemoryMiB = DefaultMemoryMiB
	}
	if c.Checkpoints != nil {
		cc := c.Checkpoints.WithDefaults()
		c.Checkpoints = &cc
	}
	return c
}

// Validate checks every field against its bounds. The error wraps ErrInvalid
// and names the field in its JSON spelling, so it can be shown to the caller
// as it is.
func (c Config) Validate() error {
	if c.VCPUs < MinVCPUs || c.VCPUs > MaxVCPUs {
		return fmt.Errorf("%w: vcpus %d out of range %d..%d", ErrInvalid, c.VCPUs, MinVCPUs, MaxVCPUs)
	}
	if c.MemoryMiB < MinMemoryMiB || c.MemoryMiB > MaxMemoryMiB {
		return fmt.Errorf("%w: memory_mib %d out of range %d..%d", ErrInvalid, c.MemoryMiB, MinMemoryMiB, MaxMemoryMiB)
	}
	if err := validateEnv(c.Env); err != nil {
		return err
	}
	if err := ValidateLabels(c.Labels); err != nil {
		return err
	}
	if err := validLifetime("ttl_s", c.TTL); err != nil {
		return err
	}
	if err := validLifetime("idle_timeout_s", c.IdleTimeout); err != nil {
		return err
	}
	if c.IdlePause < 0 || c.IdlePause > MaxTTL {
		return fmt.Errorf("%w: idle_pause_s %d out of range 0..%d (0 means never)", ErrInvalid, int64(c.IdlePause/time.Second), int64(MaxTTL/time.Second))
	}
	if c.Network != nil {
		if err := c.Network.Validate(); err != nil {
			return err
		}
	}
	if c.Snapshot != "" && !ValidSnapshotID(c.Snapshot) {
		return fmt.Errorf("%w: snapshot %q is not a snapshot id (snap- and 12 hex digits)", ErrInvalid, clip(c.Snapshot, 64))
	}
	switch c.Start {
	case StartDefault, StartTemplate, StartCold:
	default:
		return fmt.Errorf("%w: start %q: want %q or %q (or none)", ErrInvalid, clip(c.Start, 64), StartTemplate, StartCold)
	}
	if c.Start != StartDefault && c.Snapshot != "" {
		return fmt.Errorf("%w: start %q with snapshot: a fork starts from its snapshot", ErrInvalid, c.Start)
	}
	if c.Image != "" && !ValidImageName(c.Image) {
		return fmt.Errorf("%w: image %q: want 1 to %d of a-z, 0-9, '-', '_' and '.', starting with a letter or digit", ErrInvalid, clip(c.Image, 64), MaxWorkspaceName)
	}
	if c.Tenant != "" {
		if err := CheckTenantName(c.Tenant); err != nil {
			return err
		}
	}
	if c.Workspace != "" {
		if !ValidWorkspaceName(c.Workspace) {
			return fmt.Errorf("%w: workspace %q: want 1 to %d of a-z, 0-9, '-', '_' and '.', starting with a letter or digit", ErrInvalid, clip(c.Workspace, 64), MaxWorkspaceName)
		}
		if c.Snapshot != "" {
			return fmt.Errorf("%w: workspace with snapshot: a fork's machine has its snapshot's disks, and a snapshot never has a workspace", ErrInvalid)
		}
		if c.Checkpoints != nil || c.Checkpoint != nil {
			return fmt.Errorf("%w: workspace with checkpoints: a workspace is a disk that outlives the sandbox and would not roll back with its memory", ErrInvalid)
		}
	}
	if c.Checkpoints != nil {
		if err := c.Checkpoints.Validate(); err != nil {
			return err
		}
	}
	if c.Checkpoint != nil {
		if err := c.Checkpoint.Validate(); err != nil {
			return err
		}
		if c.Snapshot != "" || c.Start != StartDefault {
			return fmt.Errorf("%w: checkpoint with snapshot or start: a branch starts from its checkpoint", ErrInvalid)
		}
	}
	return nil
}

// MaxWorkspaceName bounds a workspace's name.
const MaxWorkspaceName = 64

// ValidWorkspaceName reports whether name can name a workspace: it is
// used as a file name on the host, so it is kept to a small alphabet.
func ValidWorkspaceName(name string) bool {
	if name == "" || len(name) > MaxWorkspaceName {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '-' || c == '_' || c == '.'):
		default:
			return false
		}
	}
	return true
}

func validateEnv(env map[string]string) error {
	if len(env) > MaxEnvVars {
		return fmt.Errorf("%w: env has %d variables, at most %d", ErrInvalid, len(env), MaxEnvVars)
	}
	total := 0
	for k, v := range env {
		if !isIdentifier(k) || len(k) > MaxEnvKeyBytes {
			return fmt.Errorf("%w: env key %q is not an identifier ([A-Za-z_][A-Za-z0-9_]*, at most %d bytes)", ErrInvalid, clip(k, 64), MaxEnvKeyBytes)
		}
		if len(v) > MaxEnvValueBytes {
			return fmt.Errorf("%w: env %s value is %d bytes, at most %d", ErrInvalid, k, len(v), MaxEnvValueBytes)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("%w: env %s value contains a NUL byte", ErrInvalid, k)
		}
		total += len(k) + len(v)
	}
	if total > MaxEnvTotalBytes {
		return fmt.Errorf("%w: env is %d bytes in all, at most %d", ErrInvalid, total, MaxEnvTotalBytes)
	}
	return nil
}

func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}

// State is where a sandbox is in its life.
type State string

const (
	StateStarting State = "starting"
	StateRunning  State = "running"
	StatePaused   State = "paused"
	// StateLost: the VM died; only Delete is useful.
	StateLost     State = "lost"
	StateStopping State = "stopping"
)

// Usage is what a sandbox has consumed.
type Usage struct {
	MemoryBytes int64 `json:"memory_bytes"`
	CPUTimeMS   int64 `json:"cpu_time_ms"`
}

// NetworkCounters count the guest's egress packets by verdict.
type NetworkCounters struct {
	AllowedPackets uint64 `json:"allowed_packets"`
	DroppedPackets uint64 `json:"dropped_packets"`
}

// Info describes one sandbox.
type Info struct {
	ID        string    `json:"id"`
	State     State     `json:"state"`
	Config    Config    `json:"config"`
	CreatedAt time.Time `json:"created_at"`
	UptimeS   float64   `json:"uptime_s"`
	Usage     Usage     `json:"usage"`
	// Cells counts the cells run since the sandbox was created.
	Cells int `json:"cells"`
	// CellRunning says whether a cell is running now (a second is refused).
	CellRunning bool            `json:"cell_running"`
	Network     NetworkCounters `json:"network"`
	// Lost says why, when State is StateLost.
	Lost *LostInfo `json:"lost,omitempty"`
	// BootMS is how long the VM took from its start to its agent's first
	// answer (0: not known, as for a sandbox taken back from an earlier
	// daemon).
	BootMS int64 `json:"boot_ms,omitempty"`
	// QueuedMS is how long the create waited for a slot to start its VM
	// (the host bounds the VMs starting at once) before its boot began;
	// BootMS does not include it.
	QueuedMS int64 `json:"queued_ms,omitempty"`
	// StartedFrom is how the VM started: StartedFromTemplate,
	// StartedFromBoot or StartedFromSnapshot ("" when not known).
	StartedFrom string `json:"started_from,omitempty"`
	// EnvNames are the names of Config.Env, sorted. Env values are
	// write-only: a front end returns Redacted(), whose Config has no Env.
	EnvNames []string `json:"env_names,omitempty"`
}

// Redacted returns i without its env values: Config.Env is dropped and
// EnvNames holds its names. Front ends return only redacted Infos, so a
// secret passed in env never comes back in an answer, an event or a log.
func (i Info) Redacted() Info {
	if len(i.Config.Env) == 0 {
		i.Config.Env = nil
		return i
	}
	names := make([]string, 0, len(i.Config.Env))
	for k := range i.Config.Env {
		names = append(names, k)
	}
	sort.Strings(names)
	i.EnvNames = names
	i.Config.Env = nil
	return i
}

// KilledByProtocol is LostInfo.KilledBy when the daemon stopped a VM
// because its guest broke the agent protocol.
const KilledByProtocol = "protocol"

// LostInfo is why a sandbox's VM died.
type LostInfo struct {
	// Reason is one sentence for a human.
	Reason string `json:"reason"`
	// KilledBy is "seccomp" (the VMM made a system call its jail forbids),
	// "protocol" (KilledByProtocol: the guest broke the agent protocol and
	// the daemon stopped its VM), "signal" (another signal killed it), or
	// "" (the VMM itself exited: Exit and Reason say how the VM ended).
	KilledBy string `json:"killed_by,omitempty"`
	// Exit is the VMM process's exit status or signal.
	Exit string `json:"exit,omitempty"`
	// Console is the guest console's last lines when the VM went.
	Console []string `json:"console,omitempty"`
}

// ExecRequest runs one command in the guest, outside the interpreter.
type ExecRequest struct {
	Argv []string
	// Stdin is fed to the command, at most MaxStdinBytes.
	Stdin []byte
	// Timeout must be positive; front ends fill in their default.
	Timeout time.Duration
}

// Validate checks the argv and stdin bounds and that Timeout is positive.
func (r ExecRequest) Validate() error {
	if len(r.Argv) == 0 || r.Argv[0] == "" {
		return fmt.Errorf("%w: argv must name a program", ErrInvalid)
	}
	if len(r.Argv) > MaxArgs {
		return fmt.Errorf("%w: argv has %d entries, at most %d", ErrInvalid, len(r.Argv), MaxArgs)
	}
	total := 0
	for i, a := range r.Argv {
		if len(a) > MaxArgBytes {
			return fmt.Errorf("%w: argv[%d] is %d bytes, at most %d", ErrInvalid, i, len(a), MaxArgBytes)
		}
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("%w: argv[%d] contains a NUL byte", ErrInvalid, i)
		}
		total += len(a)
	}
	if total > MaxArgvBytes {
		return fmt.Errorf("%w: argv is %d bytes in all, at most %d", ErrInvalid, total, MaxArgvBytes)
	}
	if len(r.Stdin) > MaxStdinBytes {
		return fmt.Errorf("%w: stdin is %d bytes, at most %d", ErrTooLarge, len(r.Stdin), MaxStdinBytes)
	}
	if r.Timeout <= 0 {
		return fmt.Errorf("%w: timeout must be positive", ErrInvalid)
	}
	return nil
}

// SnapshotInfo describes a snapshot of a sandbox's memory and disk.
type SnapshotInfo struct {
	ID        string    `json:"id"`
	SandboxID string    `json:"sandbox_id"`
	CreatedAt time.Time `json:"created_at"`
	SizeBytes int64     `json:"size_bytes"`
	// VCPUs and MemoryMiB are the snapshot's machine, which its forks have.
	VCPUs     int `json:"vcpus"`
	MemoryMiB int `json:"memory_mib"`
	// Tenant owns the snapshot: its sandbox's owner.
	Tenant string `json:"tenant,omitempty"`
}

// ValidSnapshotID reports whether id has the form of a snapshot id
// ("snap-" and 12 lowercase hex digits).
func ValidSnapshotID(id string) bool {
	h, ok := strings.CutPrefix(id, "snap-")
	if !ok || len(h) != 12 {
		return false
	}
	for i := 0; i < len(h); i++ {
		if !(h[i] >= '0' && h[i] <= '9' || h[i] >= 'a' && h[i] <= 'f') {
			return false
		}
	}
	return true
}

// Manager owns the sandboxes. All methods are safe for concurrent use.
// Session picks one of a sandbox's persistent sessions: a language and a
// context. The zero value is Python's default session.
type Session struct {
	// Language is the session's language ("" is Python). JavaScript and
	// TypeScript share their sessions (cell.Language.Runtime).
	Language cell.Language `json:"language,omitempty"`
	// Context names one of the language's sessions ("" is
	// cell.DefaultContext); see cell.ValidContextName.
	Context string `json:"context,omitempty"`
}

// ContextInfo is one of a sandbox's sessions.
type ContextInfo struct {
	Language cell.Language `json:"language"`
	// Name is cell.DefaultContext for a language's default session.
	Name string `json:"name"`
	// Cwd is its working directory ("" the sandbox's).
	Cwd string `json:"cwd,omitempty"`
	// Running: its program runs now.
	Running bool `json:"running"`
}

// ContextSpec is a named session to create.
type ContextSpec struct {
	Language cell.Language `json:"language,omitempty"`
	// Name is the context's name (cell.ValidContextName); "" makes one up.
	Name string `json:"name,omitempty"`
	// Cwd is its working directory (a guest path; "" the sandbox's).
	Cwd string `json:"cwd,omitempty"`
}

// Cell is a cell to run: its code, its session, and its time.
type Cell struct {
	Session
	Code string
	// Timeout bounds the cell; positive.
	Timeout time.Duration
}

// Errors wrap the sentinels above; anything else is an internal error.
type Manager interface {
	// Create validates cfg (after WithDefaults), starts a sandbox and
	// returns once it is running. A failed Create leaves nothing behind.
	Create(ctx context.Context, cfg Config) (Info, error)
	List(ctx context.Context) ([]Info, error)
	Get(ctx context.Context, id string) (Info, error)
	// Delete destroys the VM, its TAP, its rules and its files.
	Delete(ctx context.Context, id string) error

	// RunCell runs a cell in the sandbox within c.Timeout (positive). onEvent, if not nil, is called for each event as it
	// happens, from one goroutine at a time; the last call carries
	// cell.EventEnd. A cell already running makes it return ErrBusy
	// without queueing. Cancelling ctx interrupts the cell.
	//
	// Errors are for requests that never became a cell (ErrNotFound,
	// ErrBusy, ErrLost, ErrInvalid). Once a cell has started, every
	// outcome, including the VM dying, is a Result (StatusLost) with a
	// nil error, so streaming clients always get their end event.
	//
	// The cell runs in its language's session (c.Session), started on
	// first use; a language the sandbox's image lacks is ErrInvalid
	// naming those it has.
	RunCell(ctx context.Context, id string, c Cell, onEvent func(cell.Event)) (cell.Result, error)
	// Interrupt interrupts the running cell, if any, whatever its language.
	Interrupt(ctx context.Context, id string) error
	// Restart replaces a session's program with a fresh one; its variables
	// are lost, and other sessions are untouched. The zero Session is
	// Python's default one.
	Restart(ctx context.Context, id string, s Session) error
	// Contexts lists the sandbox's sessions: each language's default one
	// once it was used, and the named ones.
	Contexts(ctx context.Context, id string) ([]ContextInfo, error)
	// CreateContext creates a named session (E2B's context) of
	// spec.Language with its own variables and working directory; its
	// program starts with its first cell. A name in use is ErrInvalid;
	// more than cell.MaxContexts sessions is ErrQuota.
	CreateContext(ctx context.Context, id string, spec ContextSpec) (ContextInfo, error)
	// DeleteContext ends a named session and its program; its variables
	// are lost. A default session cannot be deleted (restart it).
	DeleteContext(ctx context.Context, id string, s Session) error
	// Exec runs req (already validated by the caller, validated again here).
	Exec(ctx context.Context, id string, req ExecRequest) (cell.ExecResult, error)

	// Upload writes r to guestPath (see GuestPath), creating parent
	// directories, and returns the bytes written. r may be larger than
	// allowed; the manager stops at its own limit with ErrTooLarge.
	Upload(ctx context.Context, id, guestPath string, r io.Reader) (int64, error)
	// Download writes the file at guestPath to w and returns the bytes
	// written. A missing file is ErrNotFound, a directory ErrInvalid.
	Download(ctx context.Context, id, guestPath string, w io.Writer) (int64, error)

	// SetNetwork replaces the egress allowlist.
	SetNetwork(ctx context.Context, id string, p NetworkPolicy) error

	// Pause writes the sandbox's machine to disk and ends its VM, whose
	// memory goes back to the host; a paused sandbox is ErrBusy to pause
	// again. Resume restores it (same id, variables and files); a cell,
	// a command or a file call on a paused sandbox resumes it by itself.
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
	// Snapshot saves the sandbox's machine (memory, vCPUs, devices) while
	// the sandbox keeps running; Create with Config.Snapshot forks it. A
	// cell running at the time makes it ErrBusy.
	Snapshot(ctx context.Context, id string) (SnapshotInfo, error)
	// Checkpoints (checkpoints.go): record, list, restore, undo.
	CheckpointManager

	// Logs calls onLine for the last req.Tail lines of one of the
	// sandbox's logs and, with req.Follow, for each line written later,
	// until ctx ends or the sandbox is deleted (both a nil error). An
	// error from onLine ends it with that error.
	Logs(ctx context.Context, id string, req LogRequest, onLine func(LogLine) error) error
	// Events subscribes to lifecycle events: every event published after
	// it returns reaches the stream, in order (see observe.go).
	Events(ctx context.Context) (EventStream, error)
	// Capacity reports the host's caps and their use.
	Capacity(ctx context.Context) (Capacity, error)
	ListSnapshots(ctx context.Context) ([]SnapshotInfo, error)
	GetSnapshot(ctx context.Context, id string) (SnapshotInfo, error)
	// DeleteSnapshot removes a snapshot; running forks keep what they use.
	DeleteSnapshot(ctx context.Context, id string) error

	// Workspaces lists the persistent volumes (Config.Workspace) of
	// every tenant; DeleteWorkspace removes the one of that name of the
	// tenant ctx's Caller acts for (DefaultTenant without one), ErrBusy
	// while a sandbox holds it.
	Workspaces(ctx context.Context) ([]WorkspaceInfo, error)
	DeleteWorkspace(ctx context.Context, name string) error
	// Images lists the root images sandboxes can boot (Config.Image);
	// DeleteImage removes a built one, ErrBusy while a sandbox or a
	// snapshot uses it.
	Images(ctx context.Context) ([]ImageInfo, error)
	DeleteImage(ctx context.Context, name string) error
	// CreateImage makes a new image (imagereq.go): pulled, imported or
	// built from a recipe, always inside a builder microVM. progress, if
	// not nil, is called for each step and output line, from one
	// goroutine at a time. A taken name is ErrBusy unless req.Replace; a
	// failure leaves no VM, disk or directory behind, and the image there
	// was before unchanged.
	CreateImage(ctx context.Context, req ImageRequest, progress func(ImageEvent)) (ImageInfo, error)

	// SetTTL gives the sandbox ttl more to live, counted from now (E2B's
	// setTimeout): it ends then whatever its Config's TTL said. ttl is 1 s
	// to the manager's cap; Info's Config.TTL then reads as the new total.
	SetTTL(ctx context.Context, id string, ttl time.Duration) (Info, error)

	// Processes (process.go). StartProcess starts req and calls onEvent
	// (if not nil) with ProcessStart, the output, and ProcessEnd, and
	// returns the exit. When ctx ends or onEvent returns an error first,
	// it returns that error and the process goes on (a background
	// command); only SignalProcess or its Timeout ends it early. A
	// program that cannot start is an end event with Exit.Error, not an
	// error: errors are for requests that never became a process
	// (ErrNotFound, ErrInvalid, ErrForbidden, ErrFull at MaxProcesses).
	StartProcess(ctx context.Context, id string, req ProcessRequest, onEvent func(ProcessEvent) error) (ProcessExit, error)
	// AttachProcess watches a running process: first its backlog, then
	// its output as it comes, then its end. An unknown or ended pid is
	// ErrNotFound.
	AttachProcess(ctx context.Context, id string, pid int, onEvent func(ProcessEvent) error) (ProcessExit, error)
	// ListProcesses lists the running processes StartProcess started.
	ListProcesses(ctx context.Context, id string) ([]ProcessInfo, error)
	// SendInput writes data to the process's stdin (or terminal); eof
	// then closes it. A process without Stdin or PTY is ErrInvalid.
	SendInput(ctx context.Context, id string, pid int, data []byte, eof bool) error
	// SignalProcess sends sig (ValidSignal) to the process's group.
	SignalProcess(ctx context.Context, id string, pid int, sig string) error
	// ResizePTY sets the terminal's size of a process started with PTY.
	ResizePTY(ctx context.Context, id string, pid int, size PTYSize) error

	// Files (fileops.go). A missing path is ErrNotFound, one the user may
	// not touch ErrForbidden.
	ListDir(ctx context.Context, id string, req FileRequest) ([]FileEntry, error)
	StatPath(ctx context.Context, id string, req FileRequest) (FileEntry, error)
	// MakeDir makes the directory and its parents; created is false when
	// it was there already.
	MakeDir(ctx context.Context, id string, req FileRequest) (created bool, err error)
	// MovePath renames from.Path to to (a full path), as the user of from.
	MovePath(ctx context.Context, id string, from FileRequest, to string) (FileEntry, error)
	// RemovePath removes a file, or a directory and what it holds.
	RemovePath(ctx context.Context, id string, req FileRequest) error
	// WatchDir calls onEvent for each change under the directory until
	// ctx ends (a nil error) or onEvent returns an error. It returns
	// once the watch is set only through the first call of onEvent with
	// the zero FileEvent, so a caller knows later changes are seen.
	WatchDir(ctx context.Context, id string, req FileRequest, onEvent func(FileEvent) error) error

	// DialPort connects to a TCP port a process in the sandbox listens on
	// (ports.go); nothing listening is ErrPortClosed. The connection is
	// the caller's to close; it ends with the sandbox.
	DialPort(ctx context.Context, id string, port int) (net.Conn, error)
}

// GuestPath turns a caller's file path into the cleaned absolute guest path
// to use. The HTTP route carries the path without its leading slash, so one
// is added if missing. It refuses NUL bytes, any ".." element (even one
// that cleaning would remove: such a request is a mistake or an attack),
// paths longer than MaxGuestPathLen, the root itself, and anything under
// /proc, /sys and /dev, whose files are the guest kernel's interfaces
// rather than data.
func GuestPath(p string) (string, error) {
	if len(p) > MaxGuestPathLen {
		return "", fmt.Errorf("%w: path is %d bytes, at most %d", ErrInvalid, len(p), MaxGuestPathLen)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("%w: path contains a NUL byte", ErrInvalid)
	}
	for _, elem := range strings.Split(p, "/") {
		if elem == ".." {
			return "", fmt.Errorf("%w: path %q contains \"..\"", ErrInvalid, clip(p, 128))
		}
	}
	abs := path.Clean("/" + p)
	if abs == "/" {
		return "", fmt.Errorf("%w: path names the root directory", ErrInvalid)
	}
	for _, fs := range []string{"/proc", "/sys", "/dev"} {
		if abs == fs || strings.HasPrefix(abs, fs+"/") {
			return "", fmt.Errorf("%w: path %q is under %s", ErrInvalid, clip(abs, 128), fs)
		}
	}
	return abs, nil
}

// clip shortens s for an error message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
