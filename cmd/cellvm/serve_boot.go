package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/cellvm/cellvm/sandbox/engine"
)

// How the daemon starts VMs (the engine's admit.go says why): at most
// --boot-concurrency at once, at most --boot-queue more waiting for a
// slot (a create past that is refused at once with 503 and Retry-After),
// and each boot given --boot-timeout from its admission for its agent to
// answer. --vmm-pool VMM processes wait, started, for the next starts.

// defaultBootTimeout is --boot-timeout's default.
const defaultBootTimeout = 60 * time.Second

// maxBootTimeout bounds --boot-timeout: a start holds its slot that long
// at most.
const maxBootTimeout = time.Hour

// serveBoot are serve's flags for VM starts.
type serveBoot struct {
	timeout     time.Duration
	concurrency int
	queue       int
	pool        int
}

func addServeBootFlags(fs *pflag.FlagSet) *serveBoot {
	b := &serveBoot{}
	def := defaultBootTimeout
	if d := bootTimeoutFromEnv(); d > 0 {
		def = d // CELLVM_BOOT_TIMEOUT, for tests and the rig
	}
	fs.DurationVar(&b.timeout, "boot-timeout", def, "how long a new or restored VM's agent has to answer, counted from the start's admission ($CELLVM_BOOT_TIMEOUT sets the default)")
	fs.IntVar(&b.concurrency, "boot-concurrency", engine.DefaultBootConcurrency(), "VMs that may start at once (boots, restores, resumes): one per CPU by default")
	fs.IntVar(&b.queue, "boot-queue", -1, "VM starts that may wait for a slot; one more is refused at once with 503 and Retry-After (-1: 4 per slot; 0: none wait)")
	fs.IntVar(&b.pool, "vmm-pool", -1, "VMM processes kept started ahead of the VMs that will need them, so that a start skips the process's clone and exec; ended under memory pressure (-1, the default: sized to the host, one per two CPUs, at most 4; 0: none)")
	return b
}

// maxVMMPool bounds --vmm-pool.
const maxVMMPool = 64

func (b *serveBoot) check() error {
	if b.timeout <= 0 || b.timeout > maxBootTimeout {
		return usagef("--boot-timeout %v: want more than 0 and at most %v", b.timeout, maxBootTimeout)
	}
	if b.concurrency < 1 || b.concurrency > 4096 {
		return usagef("--boot-concurrency %d: want 1 to 4096", b.concurrency)
	}
	if b.queue < -1 || b.queue > 1<<16 {
		return usagef("--boot-queue %d: want -1 (4 per slot), 0 (none wait) or up to %d", b.queue, 1<<16)
	}
	if b.pool < -1 || b.pool > maxVMMPool {
		return usagef("--vmm-pool %d: want 0 (none), -1 (sized to the host) or up to %d", b.pool, maxVMMPool)
	}
	return nil
}

// apply sets the engine's options for VM starts.
func (b *serveBoot) apply(o *engine.Options) {
	o.BootTimeout, o.BootConcurrency, o.VMMPool = b.timeout, b.concurrency, b.pool
	if b.pool < 0 {
		o.VMMPool = engine.DefaultVMMPool()
	}
	switch {
	case b.queue < 0:
		o.BootQueue = 0 // the engine's default: 4 per slot
	case b.queue == 0:
		o.BootQueue = -1 // none wait
	default:
		o.BootQueue = b.queue
	}
}
