package sandbox

import (
	"context"
	"fmt"
	"time"
)

// Checkpoints (time travel). A sandbox created with Config.Checkpoints
// keeps a bounded history of its whole machine: memory (and so every
// interpreter's variables, the execution count and the files of its
// writable layer, which is a tmpfs in guest memory), vCPUs and devices.
// With EveryCell, one is recorded after each completed cell and exec;
// CheckpointManager.Checkpoint records one on request. A checkpoint holds
// only the pages written since the one before (KVM's dirty-page log), as
// a layer over it, so its cost is what the cell touched.
//
// RestoreCheckpoint brings the sandbox back to checkpoint n in the same
// sandbox id, and drops the checkpoints after n; Undo restores the one
// before the last, so repeated undos walk back. Create with
// Config.Checkpoint branches a new sandbox from a kept checkpoint, as a
// snapshot fork does (fresh entropy, clock, identity and network).
//
// What is outside the VM is never undone: a request a cell sent, a file
// it wrote elsewhere. The network is kept as it is now. A sandbox with a
// Workspace (a disk that outlives it) cannot have checkpoints: its disk
// would not roll back with its memory.

// Bounds of a sandbox's checkpoints.
const (
	// DefaultCheckpointKeep is CheckpointConfig.Keep's default.
	DefaultCheckpointKeep = 20
	// MaxCheckpointKeep bounds CheckpointConfig.Keep.
	MaxCheckpointKeep = 32
)

// CheckpointConfig turns checkpoints on for a sandbox (Config.Checkpoints;
// JSON {"every_cell": bool, "keep": n}).
type CheckpointConfig struct {
	// EveryCell records a checkpoint after each completed cell and exec.
	// Without it checkpoints are recorded only on request.
	EveryCell bool `json:"every_cell,omitempty"`
	// Keep bounds the checkpoints kept (0: DefaultCheckpointKeep); past
	// it, and past the daemon's disk budget per sandbox, the oldest go.
	Keep int `json:"keep,omitempty"`
}

// WithDefaults returns c with Keep set.
func (c CheckpointConfig) WithDefaults() CheckpointConfig {
	if c.Keep == 0 {
		c.Keep = DefaultCheckpointKeep
	}
	return c
}

// Validate checks c's bounds (after WithDefaults).
func (c CheckpointConfig) Validate() error {
	if c.Keep < 1 || c.Keep > MaxCheckpointKeep {
		return fmt.Errorf("%w: checkpoints.keep %d out of range 1..%d", ErrInvalid, c.Keep, MaxCheckpointKeep)
	}
	return nil
}

// CheckpointRef names one checkpoint of a sandbox (Config.Checkpoint: a
// branch; JSON {"sandbox": id, "n": n}).
type CheckpointRef struct {
	Sandbox string `json:"sandbox"`
	N       int    `json:"n"`
}

// Validate checks r's form; whether the checkpoint exists is the
// manager's to say (ErrNotFound, the same for another tenant's sandbox).
func (r CheckpointRef) Validate() error {
	if r.Sandbox == "" {
		return fmt.Errorf("%w: checkpoint.sandbox is required", ErrInvalid)
	}
	if len(r.Sandbox) > 128 {
		return fmt.Errorf("%w: checkpoint.sandbox is longer than 128 bytes", ErrInvalid)
	}
	if r.N < 1 {
		return fmt.Errorf("%w: checkpoint.n %d: checkpoints are numbered from 1", ErrInvalid, r.N)
	}
	return nil
}

// CheckpointInfo describes one kept checkpoint.
type CheckpointInfo struct {
	// N numbers the sandbox's checkpoints from 1, in the order they were
	// recorded; a restore to n drops those after it, and the next is n+1.
	N int `json:"n"`
	// Kind is what recorded it: CheckpointCell, CheckpointExec or
	// CheckpointManual.
	Kind string `json:"kind"`
	// ExecutionCount is the sandbox's cell count when it was recorded
	// (Info.Cells).
	ExecutionCount int `json:"execution_count"`
	// CodeSHA256 is the hex SHA-256 of the cell's code (or the exec's
	// argv joined by NULs) it was recorded after; "" for a manual one.
	CodeSHA256 string    `json:"code_sha256,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	// SizeBytes is what the checkpoint holds on disk of its own: its
	// memory layer and state file (the base's bytes for the oldest).
	SizeBytes int64 `json:"size_bytes"`
	// Depth is the number of memory files a restore of it composes: 1
	// for a whole image, 1 + the layers over it otherwise.
	Depth int `json:"depth"`
	// PauseMS is how long the guest was paused to record it.
	PauseMS int64 `json:"pause_ms"`
}

// CheckpointInfo.Kind's values.
const (
	CheckpointCell   = "cell"
	CheckpointExec   = "exec"
	CheckpointManual = "manual"
)

// CheckpointManager is the time-travel part of a Manager.
type CheckpointManager interface {
	// Checkpoint records a checkpoint of the running sandbox now. A
	// sandbox created without Config.Checkpoints is ErrInvalid; a cell
	// running is ErrBusy.
	Checkpoint(ctx context.Context, id string) (CheckpointInfo, error)
	// Checkpoints lists the kept checkpoints, oldest first.
	Checkpoints(ctx context.Context, id string) ([]CheckpointInfo, error)
	// RestoreCheckpoint brings the sandbox's machine back to checkpoint
	// n, in the same id, and drops the checkpoints after n. A checkpoint
	// not kept is ErrNotFound.
	RestoreCheckpoint(ctx context.Context, id string, n int) (CheckpointInfo, error)
	// Undo restores the checkpoint before the last one (the state before
	// the last cell, with EveryCell) and drops the last; with fewer than
	// two kept it is ErrNotFound.
	Undo(ctx context.Context, id string) (CheckpointInfo, error)
}
