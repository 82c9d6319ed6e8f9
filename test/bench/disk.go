package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/cellvm/cellvm/image/initramfs"
)

// diskInit reads the whole of /dev/vda once and prints the guest's own
// measure of the time it took (uptime before and after).
const diskInit = `#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t devtmpfs dev /dev
t0=$(/bin/busybox cut -d' ' -f1 /proc/uptime)
/bin/busybox dd if=/dev/vda of=/dev/null bs=1M 2>/dev/null
t1=$(/bin/busybox cut -d' ' -f1 /proc/uptime)
echo DISK-READ $t0 $t1
/bin/busybox reboot -f
`

const diskMiB = 256

// benchDisk measures sequential reads from a virtio-blk disk in the guest,
// cellvm against QEMU's virtio-mmio block device, same kernel, same file.
func benchDisk(cellvm, qemu, kernel, tmp string) error {
	initrd := filepath.Join(tmp, "disk-initramfs.cpio")
	if err := initramfs.WriteFile(initrd, []initramfs.Entry{
		{Path: "bin/busybox", Mode: 0o755, HostPath: "/bin/busybox"},
		{Path: "init", Mode: 0o755, Data: []byte(diskInit)},
		{Path: "proc", Dir: true}, {Path: "dev", Dir: true},
	}); err != nil {
		return err
	}
	disk := filepath.Join(tmp, "disk.img")
	f, err := os.Create(disk)
	if err != nil {
		return err
	}
	buf := pattern(1 << 20)
	for i := 0; i < diskMiB; i++ {
		f.Write(buf)
	}
	f.Close()
	const cmdline = "console=ttyS0 reboot=k,panic_warm panic=1 8250.nr_uarts=1 nomodule quiet"
	runs := []vmmRun{
		{"cellvm", []string{cellvm, "boot", "--log-level", "warn", "--kernel", kernel, "--initrd", initrd, "--cmdline", cmdline,
			"--disk", disk + ",ro", "--memory", "256"}},
		{"qemu microvm", []string{qemu, "-M", "microvm,acpi=off,pic=on,pit=on,rtc=off", "-accel", "kvm", "-cpu", "host",
			"-m", "256", "-smp", "1", "-nodefaults", "-no-user-config", "-nographic", "-no-reboot", "-serial", "stdio",
			"-kernel", kernel, "-initrd", initrd, "-append", strings.Replace(cmdline, "reboot=k", "reboot=t", 1),
			"-drive", "id=d0,file=" + disk + ",format=raw,if=none,readonly=on",
			"-device", "virtio-blk-device,drive=d0"}},
	}
	re := regexp.MustCompile(`DISK-READ ([0-9.]+) ([0-9.]+)`)
	fmt.Printf("\nvirtio-blk sequential read of %d MiB (guest dd bs=1M; host page cache warm)\n", diskMiB)
	mbps := map[string]float64{}
	for _, r := range runs {
		var best float64
		for i := 0; i < 3; i++ {
			out, err := exec.Command(r.argv[0], r.argv[1:]...).Output()
			m := re.FindStringSubmatch(string(out))
			if err != nil || m == nil {
				fmt.Printf("%-14s run %d failed: %v\n", r.name, i+1, err)
				continue
			}
			t0, _ := strconv.ParseFloat(m[1], 64)
			t1, _ := strconv.ParseFloat(m[2], 64)
			if t1 > t0 {
				best = max(best, diskMiB/(t1-t0))
			}
		}
		mbps[r.name] = best
		fmt.Printf("%-14s %8.1f MiB/s (best of 3)\n", r.name, best)
	}
	if mbps["qemu microvm"] > 0 {
		fmt.Printf("ratio cellvm / qemu microvm: disk read %.2f\n", mbps["cellvm"]/mbps["qemu microvm"])
	}
	return nil
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}
