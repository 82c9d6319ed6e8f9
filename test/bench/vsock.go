package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/mdlayher/vsock"

	"github.com/cellvm/cellvm/agentclient"
	"github.com/cellvm/cellvm/image/initramfs"
)

// The vsock benchmark's guest side is this binary (built static by make
// bench) started by the guest's /init with CELLVM_BENCH_GUEST=vsock: it
// accepts connections on guestSinkPort, reads each to EOF and answers with
// the byte count.
const (
	guestSinkPort = 5000
	vsockBytes    = 128 << 20
	guestCID      = 3
)

const vsockInit = `#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t devtmpfs dev /dev
CELLVM_BENCH_GUEST=vsock /bin/guest
/bin/busybox reboot -f
`

func guestVsockSink() {
	ln, err := vsock.Listen(guestSinkPort, nil)
	if err != nil {
		fmt.Println("GUEST-ERROR", err)
		return
	}
	fmt.Println("GUEST-LISTENING")
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			n, _ := io.Copy(io.Discard, c)
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], uint64(n))
			c.Write(b[:])
		}()
	}
}

// sendAll writes n bytes to c, half-closes, and waits for the guest's count.
func sendAll(c net.Conn, n int) (time.Duration, error) {
	defer c.Close()
	buf := make([]byte, 1<<20)
	start := time.Now()
	for left := n; left > 0; left -= len(buf) {
		if _, err := c.Write(buf[:min(left, len(buf))]); err != nil {
			return 0, err
		}
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	var b [8]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, fmt.Errorf("read count: %w", err)
	}
	d := time.Since(start)
	if got := binary.LittleEndian.Uint64(b[:]); got != uint64(n) {
		return 0, fmt.Errorf("guest counted %d bytes, sent %d", got, n)
	}
	return d, nil
}

// bootAndWait starts a VMM and waits for the guest sink to listen.
func bootAndWait(ctx context.Context, argv []string) (*exec.Cmd, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "GUEST-LISTENING") {
			go io.Copy(io.Discard, out)
			return cmd, nil
		}
		if strings.Contains(sc.Text(), "GUEST-ERROR") {
			break
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	return nil, fmt.Errorf("guest sink did not start")
}

// benchVsock measures host-to-guest stream throughput: cellvm's vsock
// (Firecracker's Unix-socket protocol) against QEMU's vhost-vsock, same
// kernel, same guest program.
func benchVsock(self, cellvm, qemu, kernel, tmp string) error {
	initrd := filepath.Join(tmp, "vsock-initramfs.cpio")
	if err := initramfs.WriteFile(initrd, []initramfs.Entry{
		{Path: "bin/busybox", Mode: 0o755, HostPath: "/bin/busybox"},
		{Path: "bin/guest", Mode: 0o755, HostPath: self},
		{Path: "init", Mode: 0o755, Data: []byte(vsockInit)},
		{Path: "proc", Dir: true}, {Path: "dev", Dir: true},
	}); err != nil {
		return err
	}
	const cmdline = "console=ttyS0 reboot=k,panic_warm panic=1 8250.nr_uarts=1 nomodule quiet"
	fmt.Printf("\nvsock host-to-guest stream of %d MiB (guest reads to EOF and answers the count; best of 3)\n", vsockBytes>>20)
	rates := map[string]float64{}
	measure := func(name string, argv []string, dial func(context.Context) (net.Conn, error)) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd, err := bootAndWait(ctx, argv)
		if err != nil {
			fmt.Printf("%-14s failed: %v\n", name, err)
			return
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		var best float64
		for i := 0; i < 3; i++ {
			c, err := dial(ctx)
			if err != nil {
				fmt.Printf("%-14s dial: %v\n", name, err)
				return
			}
			d, err := sendAll(c, vsockBytes)
			if err != nil {
				fmt.Printf("%-14s run %d: %v\n", name, i+1, err)
				continue
			}
			best = max(best, float64(vsockBytes>>20)/d.Seconds())
		}
		rates[name] = best
		fmt.Printf("%-14s %8.1f MiB/s\n", name, best)
	}
	uds := filepath.Join(tmp, "bench-vsock.sock")
	measure("cellvm", []string{cellvm, "boot", "--log-level", "warn", "--kernel", kernel, "--initrd", initrd,
		"--cmdline", cmdline, "--memory", "256", "--vsock", fmt.Sprintf("%d,%s", guestCID, uds)},
		func(ctx context.Context) (net.Conn, error) { return agentclient.DialVsock(ctx, uds, guestSinkPort) })
	if out, err := exec.Command("modprobe", "vhost_vsock").CombinedOutput(); err != nil {
		fmt.Printf("qemu microvm   skipped: modprobe vhost_vsock: %v %s\n", err, out)
		return nil
	}
	measure("qemu microvm", []string{qemu, "-M", "microvm,acpi=off,pic=on,pit=on,rtc=off", "-accel", "kvm", "-cpu", "host",
		"-m", "256", "-smp", "1", "-nodefaults", "-no-user-config", "-nographic", "-no-reboot", "-serial", "stdio",
		"-kernel", kernel, "-initrd", initrd, "-append", strings.Replace(cmdline, "reboot=k", "reboot=t", 1),
		"-device", fmt.Sprintf("vhost-vsock-device,guest-cid=%d", guestCID)},
		func(ctx context.Context) (net.Conn, error) { return vsock.Dial(guestCID, guestSinkPort, nil) })
	if rates["qemu microvm"] > 0 && rates["cellvm"] > 0 {
		fmt.Printf("ratio cellvm / qemu microvm: vsock stream %.2f\n", rates["cellvm"]/rates["qemu microvm"])
	}
	return nil
}
