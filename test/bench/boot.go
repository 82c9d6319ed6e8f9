package main

// The boot bench: cellvm and QEMU microvm boot the same kernel and busybox
// initramfs, alternating, with a quiet console (what users run) and with a
// full one (every kernel message on the 8250, where each character is a
// trip through the VMM). Next to the medians it prints where the time goes
// (breakdown), and each guest's dmesg side by side over several boots
// (bootdmesg.go), since the guest kernel's own uptime at init is what
// tells the guest's speed in the machine apart from the VMM's own work.

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cellvm/cellvm/image/initramfs"
)

// benchInit prints the marker with the guest's uptime and reboots; with
// bench.dmesg on the command line it prints the kernel's log first (after
// the marker, so the timings do not pay for it).
const benchInit = `#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
echo BENCH-MARKER $(/bin/busybox cut -d' ' -f1 /proc/uptime)
case " $(/bin/busybox cat /proc/cmdline) " in *" bench.dmesg "*) /bin/busybox dmesg | /bin/busybox sed 's/^/BENCH-DMESG /' ;; esac
/bin/busybox reboot -f
`

// bootCmdline is the guest's command line in every boot run; consoles add
// to it. The breakdown needs nothing from the guest beyond the marker.
const bootCmdline = "console=ttyS0 reboot=k,panic_warm panic=1 8250.nr_uarts=1 nomodule"

// bootConsoles are the console settings the boot runs are made with.
var bootConsoles = []struct{ name, args string }{
	{"quiet", "quiet"},
	{"full", ""},
}

// bootVariants are extra cellvm bzImage runs (-boot-variant), each with
// more kernel arguments, in the quiet set: a way to try a command-line
// change against the same run's QEMU without a new binary.
var bootVariants variantFlag

func init() {
	flag.Var(&bootVariants, "boot-variant", "`NAME=ARGS`: also boot cellvm's bzImage quietly with ARGS added to the kernel command line (repeatable)")
}

var dmesgBoots = flag.Int("dmesg", 3, "boots of each bzImage guest whose dmesg the boot bench compares (0: none)")

var dmesgAll = flag.Bool("dmesg-all", false, "print every line of the two guests' dmesg side by side, not only the lines where the gap moved")

type variantFlag []struct{ name, args string }

func (v *variantFlag) String() string { return fmt.Sprint(*v) }

func (v *variantFlag) Set(s string) error {
	name, args, ok := strings.Cut(s, "=")
	if !ok || name == "" || strings.TrimSpace(args) == "" {
		return fmt.Errorf("want NAME=ARGS, got %q", s)
	}
	*v = append(*v, struct{ name, args string }{name, args})
	return nil
}

type sample struct {
	toMarker time.Duration
	uptime   float64
	toExit   time.Duration
	maxRSSKB int64
	// vmReady and vmEnded are when cellvm's log said "vm starting" (its
	// setup is done: the next thing is the guest's first instruction) and
	// "vm ended" (the guest reset; what follows is the VMM's teardown);
	// 0 for QEMU, which says neither.
	vmReady, vmEnded time.Duration
	setup            string   // cellvm's setup steps (its "vm starting" line's setup=)
	dmesg            []string // BENCH-DMESG lines, when asked for
}

type vmmRun struct {
	name string
	argv []string
}

// benchBoot boots each VMM n times, alternating, with each console setting,
// and prints medians, ratios, a breakdown and the two guests' dmesg.
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
	cellvmArgs := func(kernel, cmdline string) []string {
		return []string{cellvm, "boot", "--log-level", "info", "--kernel", kernel, "--initrd", initrd, "--cmdline", cmdline}
	}
	// microvm has no i8042, so its guest reboots by triple fault, which
	// -no-reboot turns into QEMU's exit.
	qemuArgs := func(kernel, cmdline string) []string {
		return []string{qemu, "-M", "microvm,acpi=off,pic=on,pit=on,rtc=off", "-accel", "kvm", "-cpu", "host",
			"-m", "256", "-smp", "1", "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
			"-serial", "stdio", "-kernel", kernel, "-initrd", initrd, "-append", strings.Replace(cmdline, "reboot=k", "reboot=t", 1)}
	}
	for _, console := range bootConsoles {
		cmdline := strings.TrimSpace(bootCmdline + " " + console.args)
		runs := []vmmRun{
			{"cellvm vmlinux", cellvmArgs(vmlinux, cmdline)},
			{"cellvm bzImage", cellvmArgs(bzImage, cmdline)},
			{"qemu microvm bzImage", qemuArgs(bzImage, cmdline)},
			{"qemu microvm vmlinux (PVH)", qemuArgs(vmlinux, cmdline)},
		}
		if console.name == "quiet" {
			for _, v := range bootVariants {
				runs = append(runs, vmmRun{"cellvm bzImage " + v.name, cellvmArgs(bzImage, cmdline+" "+v.args)})
			}
		}
		med := bootSet(runs, n, console.name)
		if console.name == "quiet" {
			printBreakdown(runs, med)
		}
	}
	// More boots of each bzImage guest, their dmesg side by side.
	quiet := bootCmdline + " quiet bench.dmesg"
	var pairs [][2][]dmesgLine
	for i := 0; i < *dmesgBoots; i++ {
		c, cerr := boot(cellvmArgs(bzImage, quiet))
		q, qerr := boot(qemuArgs(bzImage, quiet))
		if cerr != nil || qerr != nil {
			fmt.Printf("bench: dmesg boot %d failed: cellvm: %v; qemu: %v\n", i+1, cerr, qerr)
			continue
		}
		pairs = append(pairs, [2][]dmesgLine{parseDmesg(c.dmesg), parseDmesg(q.dmesg)})
	}
	if len(pairs) > 0 {
		compareDmesg(pairs, *dmesgAll)
	}
	return nil
}

// bootSet boots runs n times each, alternating, and prints their medians
// and the cellvm / QEMU ratios.
func bootSet(runs []vmmRun, n int, console string) map[string]sample {
	results := map[string][]sample{}
	for i := 0; i < n; i++ {
		for _, r := range runs {
			s, err := boot(r.argv)
			if err != nil {
				fmt.Printf("bench: %s (%s console) run %d failed: %v\n", r.name, console, i+1, err)
				continue
			}
			results[r.name] = append(results[r.name], s)
		}
	}
	fmt.Printf("\nboot to init, %s console, %d boots each (medians), same kernel and initramfs, nested rig %s, host THP %s\n", console, n, time.Now().Format("2006-01-02"), hostTHP())
	fmt.Printf("%-34s %12s %12s %12s %12s\n", "vmm", "to-marker", "guest-up", "to-exit", "peak-rss")
	med := map[string]sample{}
	for _, r := range runs {
		ss := results[r.name]
		if len(ss) == 0 {
			fmt.Printf("%-34s %12s\n", r.name, "failed")
			continue
		}
		m := median(ss)
		med[r.name] = m
		fmt.Printf("%-34s %10.0fms %11.3fs %10.0fms %9.1fMiB\n", r.name, ms(m.toMarker), m.uptime, ms(m.toExit), float64(m.maxRSSKB)/1024)
	}
	ratio := func(a, b string) {
		x, ok1 := med[a]
		y, ok2 := med[b]
		if !ok1 || !ok2 {
			return
		}
		fmt.Printf("ratio %s / %s (%s): to-marker %.2f, guest-up %.2f, to-exit %.2f, peak-rss %.2f\n", a, b, console,
			ms(x.toMarker)/ms(y.toMarker), x.uptime/y.uptime, ms(x.toExit)/ms(y.toExit), float64(x.maxRSSKB)/float64(y.maxRSSKB))
	}
	ratio("cellvm bzImage", "qemu microvm bzImage")
	ratio("cellvm vmlinux", "qemu microvm vmlinux (PVH)")
	for _, r := range runs[4:] {
		ratio(r.name, "qemu microvm bzImage")
	}
	return med
}

// printBreakdown splits each median boot into its steps:
//   - exec to VMM ready: the VMM's own setup, up to the guest's first
//     instruction (cellvm logs it; QEMU does not, and its firmware runs
//     in the guest anyway);
//   - to kernel clock 0: the rest of exec to marker less the guest's own
//     uptime, that is the kernel's decompression (bzImage) or the ELF's
//     entry, and the kernel's earliest code before its clock starts;
//   - kernel and init: the guest's uptime at the marker;
//   - marker to exit: init's reboot, the reset, and the VMM's teardown,
//     of which cellvm's teardown (from its "vm ended") is the last column.
func printBreakdown(runs []vmmRun, med map[string]sample) {
	fmt.Printf("\nwhere the quiet boot goes (medians; ms)\n")
	fmt.Printf("%-34s %12s %12s %12s %12s %12s\n", "vmm", "vmm-setup", "to-clock-0", "kernel+init", "marker-exit", "vmm-teardown")
	dash := func(d time.Duration) string {
		if d <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f", ms(d))
	}
	for _, r := range runs {
		m, ok := med[r.name]
		if !ok {
			continue
		}
		up := time.Duration(m.uptime * float64(time.Second))
		preKernel := m.toMarker - up
		setup, teardown := m.vmReady, time.Duration(0)
		if setup > 0 {
			preKernel -= setup
		}
		if m.vmEnded > 0 {
			teardown = m.toExit - m.vmEnded
		}
		fmt.Printf("%-34s %12s %12.0f %12.0f %12.0f %12s\n", r.name, dash(setup), ms(preKernel), ms(up), ms(m.toExit-m.toMarker), dash(teardown))
	}
	for _, r := range runs {
		if m, ok := med[r.name]; ok && m.setup != "" {
			fmt.Printf("%s: VMM setup steps (the median boot): %s\n", r.name, m.setup)
		}
	}
}

func median(ss []sample) sample {
	pick := func(f func(sample) float64) float64 {
		v := make([]float64, 0, len(ss))
		for _, s := range ss {
			if x := f(s); x != 0 {
				v = append(v, x)
			}
		}
		if len(v) == 0 {
			return 0
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	ready := time.Duration(pick(func(s sample) float64 { return float64(s.vmReady) }))
	setup := ""
	for _, s := range ss {
		if s.vmReady == ready {
			setup = s.setup
		}
	}
	return sample{
		setup:    setup,
		toMarker: time.Duration(pick(func(s sample) float64 { return float64(s.toMarker) })),
		uptime:   pick(func(s sample) float64 { return s.uptime }),
		toExit:   time.Duration(pick(func(s sample) float64 { return float64(s.toExit) })),
		maxRSSKB: int64(pick(func(s sample) float64 { return float64(s.maxRSSKB) })),
		vmReady:  ready,
		vmEnded:  time.Duration(pick(func(s sample) float64 { return float64(s.vmEnded) })),
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
	stderrPipe, err := cmd.StderrPipe()
	if err != nil {
		return sample{}, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return sample{}, err
	}
	var s sample
	// The VMM's log, read as it comes: the arrival of its "vm starting"
	// and "vm ended" lines times its setup and its teardown.
	var stderr strings.Builder
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(stderrPipe)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case s.vmReady == 0 && strings.Contains(line, `msg="vm starting"`):
				s.vmReady = time.Since(start)
				if _, after, ok := strings.Cut(line, ` setup="`); ok {
					s.setup, _, _ = strings.Cut(after, `"`)
				}
			case s.vmEnded == 0 && strings.Contains(line, `msg="vm ended"`):
				s.vmEnded = time.Since(start)
			}
			if stderr.Len() < 64<<10 {
				stderr.WriteString(line + "\n")
			}
		}
		io.Copy(io.Discard, stderrPipe)
	}()
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, "BENCH-MARKER "); i >= 0 && s.toMarker == 0 {
			s.toMarker = time.Since(start)
			s.uptime, _ = strconv.ParseFloat(strings.TrimSpace(line[i+len("BENCH-MARKER "):]), 64)
		}
		if i := strings.Index(line, "BENCH-DMESG "); i >= 0 && len(s.dmesg) < 4096 {
			s.dmesg = append(s.dmesg, strings.TrimRight(line[i+len("BENCH-DMESG "):], "\r"))
		}
	}
	io.Copy(io.Discard, stdout)
	<-logDone
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

// hostTHP is the host's transparent huge page mode (the bracketed word of
// /sys/kernel/mm/transparent_hugepage/enabled): both VMMs ask for huge
// pages for guest RAM, and get them unless it is "never", as the rig's L1
// boots by default.
func hostTHP() string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return "unknown"
	}
	s := string(b)
	if i, j := strings.IndexByte(s, '['), strings.IndexByte(s, ']'); i >= 0 && j > i {
		return s[i+1 : j]
	}
	return strings.TrimSpace(s)
}
