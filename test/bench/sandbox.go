package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// benchSandbox measures what a user waits for: a new sandbox's first cell
// result, and how many trivial cells one sandbox runs per second.
func benchSandbox(cellvm, build string) error {
	state, err := os.MkdirTemp("", "cellvm-bench-state")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	m, err := sandbox.NewVMManager(sandbox.Options{
		Exe: cellvm, Kernel: filepath.Join(build, "kernel/vmlinux"), Initrd: filepath.Join(build, "initramfs.cpio"),
		RootFS: filepath.Join(build, "rootfs.ext4"), StateDir: state, BootTimeout: 5 * time.Minute,
		Log: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return err
	}
	defer m.Close()
	ctx := context.Background()
	fmt.Println("\nsandbox (kernel, initramfs with cellvm-init, root image, vsock agent, Python)")
	var firsts []time.Duration
	for i := 0; i < 3; i++ {
		start := time.Now()
		info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 512})
		if err != nil {
			return err
		}
		created := time.Since(start)
		r, err := m.RunCell(ctx, info.ID, "print(sum(range(10)))", time.Minute, nil)
		if err != nil || r.Stdout != "45\n" {
			return fmt.Errorf("first cell: %v %+v", err, r)
		}
		first := time.Since(start)
		firsts = append(firsts, first)
		fmt.Printf("create %d: agent up in %v, first cell result in %v\n", i+1, created.Round(time.Millisecond), first.Round(time.Millisecond))
		if i == 2 {
			const n = 50
			t0 := time.Now()
			for k := 0; k < n; k++ {
				if _, err := m.RunCell(ctx, info.ID, "x = 1 + 1", time.Minute, nil); err != nil {
					return err
				}
			}
			d := time.Since(t0)
			fmt.Printf("cells per second on one sandbox: %.1f (%d trivial cells in %v)\n", float64(n)/d.Seconds(), n, d.Round(time.Millisecond))
		}
		m.Delete(ctx, info.ID)
	}
	return nil
}
