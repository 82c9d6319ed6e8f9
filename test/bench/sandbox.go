package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cellvm/cellvm/sandbox/engine"

	"github.com/cellvm/cellvm/jail"
	"github.com/cellvm/cellvm/sandbox"
)

// benchSandbox measures what a user waits for: a new sandbox's first cell
// result, how many trivial cells one sandbox runs per second, and what the
// VMM jail costs (create to agent up, jailed against unjailed VMMs, the
// two alternating in the same run).
func benchSandbox(cellvm, build string) error {
	variants := []struct {
		name string
		jail *engine.JailOptions
	}{{"unjailed", nil}}
	if j := benchJail(); j != nil {
		variants = append(variants, struct {
			name string
			jail *engine.JailOptions
		}{"jailed", j})
	}
	managers := make([]*engine.VMManager, len(variants))
	for i, v := range variants {
		m, done, err := newBenchManager(cellvm, build, v.jail, engine.TemplateOptions{})
		if err != nil {
			return err
		}
		defer done()
		managers[i] = m
	}
	ctx := context.Background()
	fmt.Println("\nsandbox (kernel, initramfs with cellvm-init, root image, vsock agent, Python)")
	const rounds = 3
	agentUp := make([][]time.Duration, len(variants))
	for i := 0; i < rounds; i++ {
		for vi, v := range variants {
			m := managers[vi]
			start := time.Now()
			info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 512})
			if err != nil {
				return fmt.Errorf("%s create: %w", v.name, err)
			}
			created := time.Since(start)
			agentUp[vi] = append(agentUp[vi], created)
			r, err := m.RunCell(ctx, info.ID, sandbox.Cell{Code: "print(sum(range(10)))", Timeout: time.Minute}, nil)
			if err != nil || r.Stdout != "45\n" {
				return fmt.Errorf("%s first cell: %v %+v", v.name, err, r)
			}
			first := time.Since(start)
			fmt.Printf("create %d (%s VMM): agent up in %v, first cell result in %v\n", i+1, v.name, created.Round(time.Millisecond), first.Round(time.Millisecond))
			if i == rounds-1 && vi == 0 {
				const n = 50
				t0 := time.Now()
				for k := 0; k < n; k++ {
					if _, err := m.RunCell(ctx, info.ID, sandbox.Cell{Code: "x = 1 + 1", Timeout: time.Minute}, nil); err != nil {
						return err
					}
				}
				d := time.Since(t0)
				fmt.Printf("cells per second on one sandbox: %.1f (%d trivial cells in %v)\n", float64(n)/d.Seconds(), n, d.Round(time.Millisecond))
			}
			m.Delete(ctx, info.ID)
		}
	}
	if len(variants) == 2 {
		on, off := medianDur(agentUp[1]), medianDur(agentUp[0])
		fmt.Printf("ratio jailed / unjailed VMM: create to agent up %.2f (%v vs %v, medians of %d)\n",
			float64(on)/float64(off), on.Round(time.Millisecond), off.Round(time.Millisecond), rounds)
	}
	return nil
}

// benchJail is the jail the benches compare unjailed VMMs with: nil
// unless the bench runs as root, which the jail needs.
func benchJail() *engine.JailOptions {
	if os.Geteuid() != 0 {
		return nil
	}
	j := &engine.JailOptions{UIDBase: 200_000_000, CgroupParent: "/sys/fs/cgroup/cellvm"}
	if !jail.CgroupV2("/sys/fs/cgroup") {
		j.CgroupParent = ""
	}
	return j
}

// benchCgroup is where serviceCgroup puts the bench process.
const benchCgroup = "/sys/fs/cgroup/cellvm-bench"

// serviceCgroup moves the bench process, and so the unjailed VMMs it
// starts, out of the root cgroup into benchCgroup with the memory, cpu
// and pids controllers on, as a daemon under systemd runs (in its
// service's cgroup). In the root cgroup the kernel charges no memory to
// any memory cgroup, so an unjailed VM there would skip the page
// accounting every jailed VM pays, which no daemon in production skips.
// (It was a suspect for the jail's cost; in the rig runs of 2026-12-04
// it did not explain it: docs/benchmarks.md.) It says where the bench
// runs; it does nothing where it is not root, on cgroup v1, or already
// out of the root cgroup.
func serviceCgroup() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil || os.Geteuid() != 0 || !jail.CgroupV2("/sys/fs/cgroup") {
		return fmt.Sprintf("the bench's cgroup: left as it is (%q, %v)", strings.TrimSpace(string(b)), err)
	}
	if strings.TrimSpace(string(b)) != "0::/" {
		return "the bench's cgroup: " + strings.TrimSpace(string(b))
	}
	if err := os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+memory +cpu +pids"), 0o644); err != nil {
		return "the bench's cgroup: the root one (could not enable its controllers: " + err.Error() + ")"
	}
	if err := os.MkdirAll(benchCgroup, 0o755); err != nil {
		return "the bench's cgroup: the root one (" + err.Error() + ")"
	}
	if err := os.WriteFile(filepath.Join(benchCgroup, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return "the bench's cgroup: the root one (" + err.Error() + ")"
	}
	return "the bench's cgroup: " + benchCgroup + " (memory, cpu, pids), as a service's daemon runs; its unjailed VMMs with it"
}

// benchVMM is the binary the benches' managers start for each VM: the
// cellvm-vmm that make cellvm builds beside cellvm, as the daemon does, or
// cellvm itself (`cellvm vmm`) without one.
func benchVMM(cellvm string) string {
	vmm := filepath.Join(filepath.Dir(cellvm), "cellvm-vmm")
	if _, err := os.Stat(vmm); err == nil {
		return vmm
	}
	return cellvm
}

// newBenchManager returns a manager over a fresh state directory, and a
// function that closes it (destroying what it still holds) and removes the
// directory; calling it again does nothing. tweak changes the options
// (an images directory shared by two managers, say).
func newBenchManager(cellvm, build string, j *engine.JailOptions, tpl engine.TemplateOptions, tweak ...func(*engine.Options)) (*engine.VMManager, func(), error) {
	state, err := os.MkdirTemp("", "cellvm-bench-state")
	if err != nil {
		return nil, nil, err
	}
	opts := engine.Options{
		Exe: benchVMM(cellvm), Kernel: filepath.Join(build, "kernel/vmlinux"), Initrd: filepath.Join(build, "initramfs.cpio"),
		RootFS: filepath.Join(build, "rootfs.ext4"), StateDir: state, BootTimeout: 5 * time.Minute,
		Log: slog.New(createdSteps), Jail: j, Templates: tpl,
	}
	for _, f := range tweak {
		f(&opts)
	}
	m, err := engine.NewVMManager(opts)
	if err != nil {
		os.RemoveAll(state)
		return nil, nil, err
	}
	var once sync.Once
	return m, func() { once.Do(func() { m.Close(); os.RemoveAll(state) }) }, nil
}

func medianDur(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
