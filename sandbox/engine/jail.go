package engine

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/cellvm/cellvm/jail"
	"github.com/cellvm/cellvm/kvm"
	"github.com/cellvm/cellvm/vmm/control"
)

// JailOptions turn on the VMM jail (package jail) for every sandbox: each
// VMM process then runs in its own namespaces, pivot_root'ed into a root
// holding only its VM's files, as its own unprivileged uid, in its own
// cgroup, under a seccomp allowlist. A daemon that is not root cannot jail
// (and cannot run VMMs as other users), so it runs them unjailed.
type JailOptions struct {
	// UIDBase: a VM's uid and gid are UIDBase plus its vsock CID, so no two
	// running VMMs share one (and none can signal or trace another).
	UIDBase int
	// CgroupParent is the cgroup v2 directory the VMs' cgroups are made
	// in (e.g. /sys/fs/cgroup/cellvm); "" gives VMMs no cgroup of their own.
	CgroupParent string
}

// Jail limits. The descriptor and thread counts are several times what a
// VMM uses (vCPU threads, one worker per device, the Go runtime's own);
// the file size bound is for the files it writes through descriptors it
// was given (the console and its log are capped before that).
const (
	jailNoFile = 1024
	jailNProc  = 256
	jailFSize  = 4 << 30
	jailPids   = 256
	// jailMemOverheadMiB is what a VMM may use beyond its guest's memory.
	jailMemOverheadMiB = 256
	// jailEmulatorMilliCPU is the CPU time a VMM may use beyond one CPU
	// per vCPU, in thousandths of a CPU: its own threads (the devices'
	// workers, the control socket, the Go runtime) work for the guest
	// next to its vCPUs, as a QEMU's emulator threads do (libvirt gives
	// them a quota of their own). Without it a booting guest's vCPU
	// spends the whole quota and the devices wait: the issue 28 bench
	// measured 0.4-0.9 s of throttling in a 7-9 s cold boot, most of the
	// jail's cost then.
	jailEmulatorMilliCPU = 500
)

// Paths inside the jail.
const (
	jailKernel = "/kernel"
	jailInitrd = "/initrd"
	jailRootFS = "/rootfs.ext4"
	jailRunDir = "/run"
)

// runDir is the sandbox directory's subdirectory for the VMM's vsock
// socket (the jail's /run, the only place a jailed VMM could write).
func runDir(dir string) string { return filepath.Join(dir, "run") }

// hostVsockPath is where the daemon finds a sandbox's vsock socket.
// Sandboxes made before the socket moved into run/ keep it in dir.
func hostVsockPath(dir string) string {
	if _, err := os.Stat(filepath.Join(dir, vsockFile)); err == nil {
		return filepath.Join(dir, vsockFile)
	}
	return filepath.Join(runDir(dir), vsockFile)
}

// jailVM turns spec (host paths) into a jailed one (the jail's paths) for
// sandbox id with vsock CID cid, prepares the jail's root in dir, and makes
// the VM's cgroup, or gives born (non-nil: the cgroup a pooled process
// was born in for this id) the VM's limits. The cgroup (nil without one)
// is the caller's to close once the VMM is gone; born is closed on error.
func (o *JailOptions) jailVM(id, dir string, cid uint64, spec *control.Spec, born *jail.Cgroup) (*jail.Cgroup, error) {
	uid := o.UIDBase + int(cid)
	j := jail.Spec{
		Root: filepath.Join(dir, "jail"), UID: uid, GID: uid, Hostname: "cellvm-vmm",
		Limits: jail.Rlimits{NoFile: jailNoFile, NProc: jailNProc, FSize: jailFSize},
		Binds: []jail.Bind{
			{Source: spec.Kernel, Target: jailKernel},
			{Source: kvm.DevicePath, Target: kvm.DevicePath, Device: true},
			{Source: runDir(dir), Target: jailRunDir, Writable: true},
		},
	}
	spec.Kernel = jailKernel
	if spec.Initrd != "" {
		j.Binds = append(j.Binds, jail.Bind{Source: spec.Initrd, Target: jailInitrd})
		spec.Initrd = jailInitrd
	}
	for i := range spec.Disks {
		if spec.Disks[i].Passed {
			continue // passed open: nothing to bind in
		}
		if !spec.Disks[i].ReadOnly {
			return nil, fmt.Errorf("jail: writable disk %s: only read-only images are bound in", spec.Disks[i].Path)
		}
		target := jailRootFS
		if i > 0 {
			target = fmt.Sprintf("/disk%d", i)
		}
		j.Binds = append(j.Binds, jail.Bind{Source: spec.Disks[i].Path, Target: target})
		spec.Disks[i].Path = target
	}
	if spec.Vsock != nil {
		spec.Vsock.UDS = filepath.Join(jailRunDir, vsockFile)
	}
	if spec.Control != "" {
		spec.Control = filepath.Join(jailRunDir, controlFile)
	}
	cg := born
	switch {
	case born != nil:
		if err := born.SetLimits(vmCgroupLimits(spec)); err != nil {
			born.Close()
			return nil, err
		}
		j.Cgroup = born.Path
	case o.CgroupParent != "":
		var err error
		cg, err = jail.NewCgroup(o.CgroupParent, id, vmCgroupLimits(spec))
		if err != nil {
			return nil, err
		}
		j.Cgroup = cg.Path
	}
	if err := jail.Prepare(j); err != nil {
		cg.Close()
		return nil, err
	}
	spec.Jail = &j
	return cg, nil
}

// vmCgroupLimits are the limits of the cgroup of a VMM for spec.
func vmCgroupLimits(spec *control.Spec) jail.CgroupLimits {
	return jail.CgroupLimits{CPUMilli: spec.VCPUs*1000 + jailEmulatorMilliCPU, MemoryBytes: int64(spec.MemoryMiB+jailMemOverheadMiB) << 20, Pids: jailPids}
}
