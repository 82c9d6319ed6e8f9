package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// This file is the observation part of the contract: lifecycle events, log
// lines and the host's capacity. Supervisors and dashboards read them; they
// never change a sandbox.

// EventType names a lifecycle event.
type EventType string

const (
	EventCreated       EventType = "created"
	EventLost          EventType = "lost"
	EventDeleted       EventType = "deleted"
	EventPaused        EventType = "paused"
	EventResumed       EventType = "resumed"
	EventPolicyChanged EventType = "policy_changed"
)

// Why a sandbox was deleted (Event.Reason of a deleted event).
const (
	DeletedByRequest  = "request"
	DeletedByTTL      = "ttl"
	DeletedByIdle     = "idle"
	DeletedByShutdown = "shutdown"
)

// Event is one change in a sandbox's life. Seq grows by one per event of a
// manager, so a subscriber sees gaps if it ever misses one.
type Event struct {
	Seq     uint64    `json:"seq"`
	Type    EventType `json:"type"`
	Sandbox string    `json:"sandbox"`
	Time    time.Time `json:"time"`
	// Lost says why, for a lost event.
	Lost *LostInfo `json:"lost,omitempty"`
	// Reason is why a deleted sandbox went (DeletedBy...).
	Reason string `json:"reason,omitempty"`
	// Network is the new allowlist of a policy_changed event.
	Network *NetworkPolicy `json:"network,omitempty"`
	// Tenant owns the sandbox; a tenant's stream carries its own only.
	Tenant string `json:"tenant,omitempty"`
	// Egress is a deleted or lost sandbox's egress verdicts over its
	// life, when it had a network.
	Egress *EgressReport `json:"egress,omitempty"`
}

// EgressReport is what a sandbox's network policy decided over its life:
// the connections it let through and the packets it dropped (the
// policy's counters), and its resolver's answers by name.
type EgressReport struct {
	AllowedPackets uint64 `json:"allowed_packets"`
	DroppedPackets uint64 `json:"dropped_packets"`
	DNSForwarded   uint64 `json:"dns_forwarded"`
	DNSRefused     uint64 `json:"dns_refused"`
	// Names counts the resolver's answers per name asked, at most
	// MaxEgressNames of them (the rest count under "(other names)").
	Names []DNSNameCount `json:"names,omitempty"`
}

// MaxEgressNames bounds EgressReport.Names: a guest chooses the names it
// asks for.
const MaxEgressNames = 256

// DNSNameCount is the resolver's answers for one name.
type DNSNameCount struct {
	Name      string `json:"name"`
	Forwarded uint64 `json:"forwarded"`
	Refused   uint64 `json:"refused"`
}

// EventStream delivers events in order from the moment it was opened.
type EventStream interface {
	// Next blocks for the next event. It returns ErrEventsLagged when the
	// subscriber fell too far behind (events were dropped; subscribe
	// again and re-read the state with List), ctx's error when ctx ends,
	// and io.EOF once the stream is closed.
	Next(ctx context.Context) (Event, error)
	Close() error
}

// ErrEventsLagged ends an event stream whose reader fell behind.
var ErrEventsLagged = errors.New("event stream fell behind; events were dropped")

// LogSource names one of a sandbox's logs.
type LogSource string

const (
	// LogConsole is the guest's serial console: the kernel's messages and
	// everything the guest's init and agent print.
	LogConsole LogSource = "console"
	// LogAgent is the guest init's and agent's own log records: the
	// console lines that are their structured (slog) records.
	LogAgent LogSource = "agent"
	// LogVMM is the sandbox's VMM process's log (the host side).
	LogVMM LogSource = "vmm"
)

// Log limits. A guest writes the console, so its lines are cut and the
// amount read back is bounded.
const (
	DefaultLogTail  = 200
	MaxLogTail      = 10000
	MaxLogLineBytes = 4096
	// MaxLogTailBytes bounds how far back from a log's end a tail reads.
	MaxLogTailBytes = 4 << 20
)

// LogRequest asks for the last Tail lines of a log (0: none), and, with
// Follow, for every line written after them until the context ends or the
// sandbox is deleted.
type LogRequest struct {
	Source LogSource
	Tail   int
	Follow bool
}

// Validate checks the source and the tail's range.
func (r LogRequest) Validate() error {
	switch r.Source {
	case LogConsole, LogAgent, LogVMM:
	default:
		return fmt.Errorf("%w: log source %q (console, agent or vmm)", ErrInvalid, clip(string(r.Source), 32))
	}
	if r.Tail < 0 || r.Tail > MaxLogTail {
		return fmt.Errorf("%w: tail %d out of range 0..%d", ErrInvalid, r.Tail, MaxLogTail)
	}
	return nil
}

// LogLine is one line of a log, without its newline, at most
// MaxLogLineBytes (a longer line is cut and Cut says by how much).
type LogLine struct {
	Source LogSource `json:"source"`
	Text   string    `json:"text"`
	Cut    int       `json:"cut_bytes,omitempty"`
}

// Capacity is the host's caps and what is in use (0 caps: none).
type Capacity struct {
	MaxSandboxes  int `json:"max_sandboxes"`
	Sandboxes     int `json:"sandboxes"`
	MaxMemoryMiB  int `json:"max_memory_mib"`
	MemoryMiBUsed int `json:"memory_mib_used"`
	VCPUsUsed     int `json:"vcpus_used"`
	// Templates are the warm-start templates the daemon keeps, one per
	// machine shape asked for (none when templates are off). A template
	// build's VM counts in MemoryMiBUsed and VCPUsUsed, not in Sandboxes.
	Templates []TemplateInfo `json:"templates,omitempty"`
	// TemplateLockedMiB is the host memory locked to keep templates'
	// memory resident (serve --template-resident lock).
	TemplateLockedMiB int64 `json:"template_locked_mib,omitempty"`
	// Boots is the queue of VM starts (boots, restores, resumes), when
	// the manager bounds them.
	Boots *BootQueue `json:"boots,omitempty"`
	// VMMPool is the pool of VMM processes started ahead of the VMs that
	// will need them (serve --vmm-pool), when there is one.
	VMMPool *VMMPoolInfo `json:"vmm_pool,omitempty"`
}

// VMMPoolInfo is the state of the pool of ready VMM processes: Size are
// kept ready, Ready are now, and MemoryMiB is what they hold (their
// resident memory; they hold no guest memory). Shrunk says memory
// pressure has emptied the pool until it falls. The counters run from the
// daemon's start: starts that took a ready process (Claimed) or found
// none (Missed, and started their own), processes started, starts that
// failed, processes that died idle, and shrinks.
type VMMPoolInfo struct {
	Size          int   `json:"size"`
	Ready         int   `json:"ready"`
	MemoryMiB     int64 `json:"memory_mib"`
	Shrunk        bool  `json:"shrunk,omitempty"`
	Claimed       int64 `json:"claimed"`
	Missed        int64 `json:"missed"`
	Spawned       int64 `json:"spawned"`
	SpawnFailures int64 `json:"spawn_failures"`
	DiedIdle      int64 `json:"died_idle"`
	Shrinks       int64 `json:"shrinks"`
}

// BootQueue is the state of the host's VM starts: at most Slots start at
// once, at most MaxWaiting more wait for a slot, and a start beyond that
// is refused at once (ErrQueueFull).
type BootQueue struct {
	Slots      int `json:"slots"`
	Starting   int `json:"starting"`
	Waiting    int `json:"waiting"`
	MaxWaiting int `json:"max_waiting"`
	// Admitted and Refused count starts since the manager began.
	Admitted uint64 `json:"admitted"`
	Refused  uint64 `json:"refused"`
}

// TemplateState is where a template is in its life: pending (asked for,
// not built yet, or its files changed), building, ready (plain creates of
// its shape restore it), failed (its build or a restore from it failed;
// it is built again later).
type TemplateState string

const (
	TemplatePending  TemplateState = "pending"
	TemplateBuilding TemplateState = "building"
	TemplateReady    TemplateState = "ready"
	TemplateFailed   TemplateState = "failed"
)

// TemplateInfo describes one template.
type TemplateInfo struct {
	VCPUs     int  `json:"vcpus"`
	MemoryMiB int  `json:"memory_mib"`
	Root      bool `json:"root"`
	// Image is the root image the template boots.
	Image string        `json:"image"`
	State TemplateState `json:"state"`
	// Key names the guest files (kernel, initramfs, root image, VMM) and
	// shape the template was built from, or is being built from.
	Key       string     `json:"key,omitempty"`
	BuiltAt   *time.Time `json:"built_at,omitempty"`
	SizeBytes int64      `json:"size_bytes,omitempty"`
	// Error says why the last build or restore failed.
	Error string `json:"error,omitempty"`
	// ReadyAfterMS is how long after the manager's start the template
	// last became ready (0: it was on disk at the start); absent while
	// it is not ready.
	ReadyAfterMS *int64 `json:"ready_after_ms,omitempty"`
	// Failures counts the builds that failed since the last one that
	// worked; RetryInMS is how long until the next is tried (failed).
	Failures  int   `json:"failures,omitempty"`
	RetryInMS int64 `json:"retry_in_ms,omitempty"`
}

// MaxNodeLen bounds a node name in sandbox ids.
const MaxNodeLen = 63

// ValidNode checks a node name for sandbox ids: lower-case letters,
// digits, dots and dashes, starting and ending with a letter or digit (a
// DNS name, as a router resolves it), at most MaxNodeLen bytes; "" is no
// node.
func ValidNode(node string) error {
	if node == "" {
		return nil
	}
	ok := len(node) <= MaxNodeLen
	for i := 0; ok && i < len(node); i++ {
		c := node[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		ok = alnum || (c == '-' || c == '.') && i > 0 && i < len(node)-1
	}
	if !ok {
		return fmt.Errorf("%w: node name %q: want lower-case letters, digits, '.' and '-' (not at the ends), at most %d bytes", ErrInvalid, clip(node, 80), MaxNodeLen)
	}
	return nil
}
