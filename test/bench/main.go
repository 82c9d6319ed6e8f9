// Command cellvm-bench measures cellvm against QEMU's microvm machine in the
// same nested-rig run, on the same kernel and initramfs, and prints ratios.
// Absolute times in the rig (QEMU TCG with nested KVM) mean little; the
// ratio of two VMMs measured side by side does.
//
// Each boot runs a busybox /init that prints a marker and reboots. For each
// VMM it reports: wall time from exec to the marker on the console (VMM
// start + kernel boot + init), the guest's own uptime at the marker (kernel
// boot alone), wall time to exit, and the VMM process's peak RSS.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Benchmarks beyond boot live in their own files: disk.go (virtio-blk
// sequential read, cellvm vs QEMU), vsock.go (host-to-guest stream, cellvm
// vs QEMU's vhost-vsock), sandbox.go (create to first cell result,
// cells per second), e2b.go (create to first result through the E2B
// front end, against cellvm's own API), snapshots.go (templates, forks, pause and resume,
// and forks' memory, against a cold boot) and images.go (pull, import and
// first create of an image users bring, against the default image),
// starts.go (the numbers users compare), bursts.go (8 creates at once
// through a daemon with default flags) and checkpoints.go (time travel:
// a checkpoint's pause against its cell, restores and branches). -only
// picks some of them.

func main() {
	cellvm := flag.String("cellvm", "build/bin/cellvm", "cellvm binary")
	build := flag.String("build", "build", "build directory (kernel/vmlinux, kernel/bzImage)")
	qemu := flag.String("qemu", "qemu-system-x86_64", "QEMU binary")
	n := flag.Int("n", 5, "boots per VMM")
	only := flag.String("only", "", "run only these benches, comma-separated: "+strings.Join(benchParts, ", ")+" (default: all)")
	if os.Getenv("CELLVM_BENCH_GUEST") == "vsock" {
		guestVsockSink()
		return
	}
	flag.Parse()
	*cellvm, _ = filepath.Abs(*cellvm)
	*build, _ = filepath.Abs(*build)
	parts, err := selectParts(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cellvm-bench:", err)
		os.Exit(2)
	}
	if err := run(*cellvm, *build, *qemu, *n, parts); err != nil {
		fmt.Fprintln(os.Stderr, "cellvm-bench:", err)
		os.Exit(1)
	}
}

// benchParts names the benches -only can pick, in the order they run.
var benchParts = []string{"boot", "disk", "vsock", "sandbox", "e2b", "snapshots", "images", "starts", "jail", "bursts", "checkpoints"}

// selectParts turns -only's list into the set of benches to run; an empty
// list is all of them.
func selectParts(only string) (map[string]bool, error) {
	parts := map[string]bool{}
	if strings.TrimSpace(only) == "" {
		for _, p := range benchParts {
			parts[p] = true
		}
		return parts, nil
	}
	for _, p := range strings.Split(only, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(benchParts, p) {
			return nil, fmt.Errorf("-only: unknown bench %q (want some of: %s)", p, strings.Join(benchParts, ", "))
		}
		parts[p] = true
	}
	return parts, nil
}

func run(cellvm, build, qemu string, n int, parts map[string]bool) error {
	tmp, err := os.MkdirTemp("", "cellvm-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	vmlinux := filepath.Join(build, "kernel/vmlinux")
	bzImage := filepath.Join(build, "kernel/bzImage")
	if parts["boot"] {
		if err := benchBoot(cellvm, qemu, vmlinux, bzImage, tmp, n); err != nil {
			return err
		}
	}
	if parts["disk"] {
		if err := benchDisk(cellvm, qemu, bzImage, tmp); err != nil {
			fmt.Println("bench: disk:", err)
		}
	}
	if parts["vsock"] {
		if self, err := os.Executable(); err == nil {
			if err := benchVsock(self, cellvm, qemu, bzImage, tmp); err != nil {
				fmt.Println("bench: vsock:", err)
			}
		}
	}
	if parts["sandbox"] {
		if err := benchSandbox(cellvm, build); err != nil {
			fmt.Println("bench: sandbox:", err)
		}
	}
	if parts["e2b"] {
		if err := benchE2B(cellvm, build); err != nil {
			fmt.Println("bench: e2b:", err)
		}
	}
	if parts["snapshots"] {
		if err := benchSnapshots(cellvm, build); err != nil {
			fmt.Println("bench: snapshots:", err)
		}
	}
	if parts["images"] {
		if err := benchImages(cellvm, build); err != nil {
			fmt.Println("bench: images:", err)
		}
	}
	if parts["starts"] {
		if err := benchStarts(cellvm, build); err != nil {
			fmt.Println("bench: starts:", err)
		}
	}
	if parts["jail"] && !parts["starts"] { // starts measures the jail too
		if err := benchJailOnly(cellvm, build); err != nil {
			fmt.Println("bench: jail:", err)
		}
	}
	if parts["bursts"] {
		if err := benchBursts(cellvm, build); err != nil {
			fmt.Println("bench: bursts:", err)
		}
	}
	if parts["checkpoints"] {
		if err := benchCheckpoints(cellvm, build); err != nil {
			fmt.Println("bench: checkpoints:", err)
		}
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
