package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/spf13/cobra"

	"github.com/cellvm/cellvm/kvm"
)

// cmdDoctor checks what cellvm needs on this host and says exactly what is
// missing and how to fix it. It exits non-zero if sandboxes cannot run.
// With --kvm it checks only KVM (what `make test` asks to pick native KVM
// tests or the nested rig).
func (a *app) doctorCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "check this host for what cellvm needs (exit 1 if sandboxes cannot run)",
		Args:  noArgs,
	}
	kvmOnly := cmd.Flags().Bool("kvm", false, "check only whether this host's KVM can run cellvm guests (exit 0 if it can)")
	cmd.RunE = func(*cobra.Command, []string) error {
		if code := doctor(*kvmOnly, a.stdout); code != 0 {
			return exitStatus(code)
		}
		return nil
	}
	return cmd
}

func doctor(kvmOnly bool, stdout io.Writer) int {
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
	good, detail, fix := kvmDoctorLine(kvm.Check(kvm.CheckConfig{}))
	check("/dev/kvm", good, detail, fix)
	ok = ok && good
	if kvmOnly {
		if ok {
			return 0
		}
		return 1
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
	if exe, err := os.Executable(); err == nil {
		// Not fatal: without it each VM runs as `cellvm vmm`, larger.
		if path, problem := findVMMBinary(exe); problem == "" {
			check("VMM binary", true, path, "")
		} else {
			check("VMM binary", false, problem, "make cellvm")
		}
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

// kvmDoctorLine is doctor's /dev/kvm line for a verdict: whether it is good,
// what was found (the provider always named), and the fix.
func kvmDoctorLine(v kvm.Verdict) (good bool, detail, fix string) {
	if v.Usable {
		return true, fmt.Sprintf("provider %s; the probe guest (64-bit, paging, IDT, SSE, I/O exit) ran in %v",
			v.Provider, v.Took.Round(time.Millisecond)), ""
	}
	return false, fmt.Sprintf("provider %s; cellvm cannot run guests here: %s", v.Provider, v.Reason), v.Fix
}
