// Package jail confines a cellvm VMM process the way Firecracker's jailer
// confines Firecracker: assume the guest controls its kernel and every
// byte it sends, and assume a bug in the VMM will be found one day. What
// such a bug then reaches is this jail, not the host:
//
//   - new mount, pid, ipc, uts and network namespaces (the daemon starts the
//     process with them; Spec.Cloneflags);
//   - pivot_root into a root that holds only this VM's files: the kernel,
//     initrd and root image bind-mounted read-only, /dev/kvm, and a
//     directory for its vsock socket; the root itself read-only;
//   - a per-VM unprivileged uid and gid, no supplementary groups, an empty
//     capability bounding set, no_new_privs;
//   - rlimits on open files, threads and file size;
//   - a cgroup v2 per VM (cpu.max from its vCPUs plus half a CPU for its own threads, memory.max for guest
//     memory plus overhead, pids.max), entered at clone time;
//   - a seccomp-bpf allowlist, installed after the machine is built and
//     before the guest's first instruction (Seccomp, below, says what each
//     allowed system call is for).
//
// The daemon keeps every privilege the VMM does not need: it creates the
// TAP and hands the VMM an open descriptor, so the VMM never needs
// /dev/net/tun or CAP_NET_ADMIN.
//
// The order inside the VMM process is: Enter (a check that its mount
// namespace is not its launcher's, then mounts and pivot_root, while
// still root in its namespaces), build the machine (open the files, KVM,
// memory), Drop (uid, capabilities, no_new_privs, rlimits), Seccomp, then
// run the guest. A pooled VMM process (one started ahead, waiting for its
// VM) empties its capability bounding set before all of that, while it
// waits (DropBoundingSet): it keeps its effective capabilities for Enter,
// and its start's Drop is left four all-threads calls instead of 45.
package jail
