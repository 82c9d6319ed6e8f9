package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/cellvm/cellvm/kvm"
)

// cmdDoctor checks what cellvm needs on this host and says exactly what is
// missing and how to fix it. It exits non-zero if sandboxes cannot run.
func cmdDoctor(stdout io.Writer) int {
	ok := true
	check := func(name string, good bool, detail, fix string) {
		mark := "ok  "
		if !good {
			mark = "FAIL"
		}
		fmt.Fprintf(stdout, "[%s] %-22s %s\n", mark, name, detail)
		if !good && fix != "" {
			fmt.Fprintf(stdout, "       fix: %s\n", fix)
		}
	}
	if kvm.Available() {
		sys, err := kvm.Open()
		if err != nil {
			check("/dev/kvm", false, err.Error(), "make /dev/kvm readable and writable by this user (group kvm)")
			ok = false
		} else {
			check("/dev/kvm", true, fmt.Sprintf("API 12, max vCPUs %d", sys.CheckExtension(kvm.CapMaxVCPUs)), "")
			sys.Close()
		}
	} else {
		check("/dev/kvm", false, "missing: this host exposes no hardware virtualization",
			"run on a host with VT-x/AMD-V and the kvm module loaded; on a machine without it, 'make test' runs cellvm in the nested rig")
		ok = false
	}
	k, i, r, _ := guestFiles("", "", "")
	for _, f := range []struct{ name, path, fix string }{
		{"guest kernel", k, "make kernel"},
		{"guest initramfs", i, "make initramfs"},
		{"guest root image", r, "make image"},
	} {
		if f.path == "" {
			check(f.name, false, "not found", f.fix)
			ok = false
			continue
		}
		fi, err := os.Stat(f.path)
		if err != nil {
			check(f.name, false, err.Error(), f.fix)
			ok = false
			continue
		}
		check(f.name, true, fmt.Sprintf("%s (%d MiB)", f.path, fi.Size()>>20), "")
	}
	if p, err := exec.LookPath("iptables"); err == nil {
		check("iptables", true, p+" (needed for network policies)", "")
	} else {
		check("iptables", false, "missing (only sandboxes with a network policy need it)", "apt-get install iptables")
	}
	if _, err := os.Stat("/dev/net/tun"); err == nil {
		check("/dev/net/tun", true, "present (needed for network policies)", "")
	} else {
		check("/dev/net/tun", false, "missing (only sandboxes with a network policy need it)", "modprobe tun")
	}
	if ok {
		fmt.Fprintln(stdout, "cellvm can run sandboxes here.")
		return 0
	}
	fmt.Fprintln(stdout, "cellvm cannot run sandboxes here until the failures above are fixed.")
	return 1
}
