// Package control is the contract between a VMM process and whoever starts
// it (the daemon, `cellvm boot`, a test): what the process is told, what
// it can be asked while it runs, and what it says as it ends. It is a leaf,
// as package jail is: the daemon links it without the VMM.
//
// In the order of a VMM's life:
//
//   - Spec (spec.go) is the one description of a VMM process: the machine,
//     its devices, its jail, its logs. It is JSON (vmm.json in a sandbox's
//     directory), read and validated by the process (Load) before it does
//     anything. The process's command line is `cellvm-vmm vmm --config
//     FILE`, or `cellvm vmm --config FILE` (Args after the binary); a restarted daemon finds the process again by what it
//     recorded of it (pid, start time, cgroup), never by that argv, which
//     the process could rewrite.
//   - Files the VMM cannot or must not open itself (a workspace disk, the
//     TAP, a snapshot to restore, the End report) come open in named slots
//     (slots.go): the launcher records in Spec.Files which descriptor each
//     has (Pass), the VMM takes them by name. Nobody computes a descriptor
//     number at a call site.
//   - The control socket (control.go) takes snapshots while the VM runs. A
//     request is one JSON line sent with the two files the snapshot goes
//     to attached (SCM_RIGHTS): the state file, then the memory file,
//     opened for writing by the requester. The VMM never opens a file for a
//     snapshot, which a jailed VMM could not (its seccomp filter refuses
//     open). The answer is one JSON line: {"ok": true}, or a Code
//     (code.go: no_space, bad_request, ...) and the error's text, so the
//     requester decides by errors.Is. One request per connection.
//   - The End report (end.go) is the process's last word: why the VM ended,
//     written into the file in SlotEnd as it exits. With the process's wait
//     status it is the whole account of a VM that went away; no log text is
//     parsed for it.
package control
