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
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cellvm/cellvm/image/initramfs"
)

// Benchmarks beyond boot live in their own files: disk.go (virtio-blk
// sequential read, cellvm vs QEMU), vsock.go (host-to-guest stream, cellvm
// vs QEMU's vhost-vsock), sandbox.go (create to first cell result,
// cells per second), e2b.go (create to first result through the E2B
// front end, against cellvm's own API), snapshots.go (templates, forks, pause and resume,
// and forks' memory, against a cold boot) and images.go (pull, import and
// first create of an image users bring, against the default image). -only
// picks some of them.

const benchInit = `#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
echo BENCH-MARKER $(/bin/busybox cut -d' ' -f1 /proc/uptime)
/bin/busybox reboot -f
`

type sample struct {
	toMarker time.Duration
	uptime   float64
	toExit   time.Duration
	maxRSSKB int64
}

type vmmRun struct {
	name string
	argv []string
}

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
var benchParts = []string{"boot", "disk", "vsock", "sandbox", "e2b", "snapshots", "images"}

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
	return nil
}

// benchBoot boots each VMM n times, alternating, and prints medians and
// ratios.
func benchBoot(cellvm, qemu, vmlinux, bzImage, tmp string, n int) error {
	initrd := filepath.Join(tmp, "initramfs.cpio")
	if err := initramfs.WriteFile(initrd, []initramfs.Entry{
		{Path: "bin/busybox", Mode: 0o755, HostPath: "/bin/busybox"},
		{Path: "init", Mode: 0o755, Data: []byte(benchInit)},
		{Path: "proc", Dir: true},
		{Path: "dev", Dir: true},
	}); err != nil {
		return err
	}
	const cmdline = "console=ttyS0 reboot=k,panic_warm panic=1 8250.nr_uarts=1 nomodule quiet"
	// microvm has no i8042, so its guest reboots by triple fault, which
	// -no-reboot turns into QEMU's exit.
	qemuCmdline := strings.Replace(cmdline, "reboot=k", "reboot=t", 1)
	qemuArgs := func(kernel string) []string {
		return []string{qemu, "-M", "microvm,acpi=off,pic=on,pit=on,rtc=off", "-accel", "kvm", "-cpu", "host",
			"-m", "256", "-smp", "1", "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
			"-serial", "stdio", "-kernel", kernel, "-initrd", initrd, "-append", qemuCmdline}
	}
	runs := []vmmRun{
		{"cellvm vmlinux", []string{cellvm, "boot", "--log-level", "warn", "--kernel", vmlinux, "--initrd", initrd, "--cmdline", cmdline}},
		{"cellvm bzImage", []string{cellvm, "boot", "--log-level", "warn", "--kernel", bzImage, "--initrd", initrd, "--cmdline", cmdline}},
		{"qemu microvm bzImage", qemuArgs(bzImage)},
		{"qemu microvm vmlinux (PVH)", qemuArgs(vmlinux)},
	}
	results := map[string][]sample{}
	for i := 0; i < n; i++ {
		for _, r := range runs {
			s, err := boot(r.argv)
			if err != nil {
				fmt.Printf("bench: %s run %d failed: %v\n", r.name, i+1, err)
				continue
			}
			results[r.name] = append(results[r.name], s)
		}
	}
	fmt.Printf("\nboot to init, %d boots each (medians), same kernel and initramfs, nested rig %s\n", n, time.Now().Format("2006-01-02"))
	fmt.Printf("%-28s %12s %12s %12s %12s\n", "vmm", "to-marker", "guest-up", "to-exit", "peak-rss")
	med := map[string]sample{}
	for _, r := range runs {
		ss := results[r.name]
		if len(ss) == 0 {
			fmt.Printf("%-28s %12s\n", r.name, "failed")
			continue
		}
		m := median(ss)
		med[r.name] = m
		fmt.Printf("%-28s %10.0fms %11.3fs %10.0fms %9.1fMiB\n", r.name, ms(m.toMarker), m.uptime, ms(m.toExit), float64(m.maxRSSKB)/1024)
	}
	ratio := func(a, b string) {
		x, ok1 := med[a]
		y, ok2 := med[b]
		if !ok1 || !ok2 {
			return
		}
		fmt.Printf("ratio %s / %s: to-marker %.2f, guest-up %.2f, to-exit %.2f, peak-rss %.2f\n", a, b,
			ms(x.toMarker)/ms(y.toMarker), x.uptime/y.uptime, ms(x.toExit)/ms(y.toExit), float64(x.maxRSSKB)/float64(y.maxRSSKB))
	}
	ratio("cellvm bzImage", "qemu microvm bzImage")
	ratio("cellvm vmlinux", "qemu microvm vmlinux (PVH)")
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func median(ss []sample) sample {
	pick := func(f func(sample) float64) float64 {
		v := make([]float64, len(ss))
		for i, s := range ss {
			v[i] = f(s)
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	return sample{
		toMarker: time.Duration(pick(func(s sample) float64 { return float64(s.toMarker) })),
		uptime:   pick(func(s sample) float64 { return s.uptime }),
		toExit:   time.Duration(pick(func(s sample) float64 { return float64(s.toExit) })),
		maxRSSKB: int64(pick(func(s sample) float64 { return float64(s.maxRSSKB) })),
	}
}

// boot runs one VM and times it.
func boot(argv []string) (sample, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return sample{}, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return sample{}, err
	}
	var s sample
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, "BENCH-MARKER "); i >= 0 && s.toMarker == 0 {
			s.toMarker = time.Since(start)
			s.uptime, _ = strconv.ParseFloat(strings.TrimSpace(line[i+len("BENCH-MARKER "):]), 64)
		}
	}
	io.Copy(io.Discard, stdout)
	err = cmd.Wait()
	s.toExit = time.Since(start)
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		s.maxRSSKB = ru.Maxrss
	}
	if err != nil {
		return s, fmt.Errorf("%v: %v: %s", argv[0], err, lastLines(stderr.String(), 5))
	}
	if s.toMarker == 0 {
		return s, fmt.Errorf("no marker on the console")
	}
	return s, nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, " | ")
}
