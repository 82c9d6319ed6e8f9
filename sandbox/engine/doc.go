// Package engine is cellvm's sandbox engine: the sandbox.Manager that runs
// each sandbox in its own microVM. It starts and watches one `cellvm vmm`
// process per VM (jailed, in its own cgroup), wires its network through
// package netpolicy, talks to the guest's agent over vsock, and keeps on
// disk what outlives a VM: paused machines, snapshots, templates,
// workspaces and the images sandboxes boot.
//
// It is apart from package sandbox, the contract, so that every front end
// (the HTTP API, MCP, the tool loop, the clients' tests) links only the
// contract and its test double (sandbox/sandboxtest), never the VMM, KVM,
// the devices, the jail or the host's network code. Only cmd/ composes
// the two.
//
// Where things are: manager.go (create, delete, cells, exec, files, the
// reaper), vmproc.go (the VMM process: one startVMM, one wait for its
// agent), lost.go (why a VM went: its End report and wait status),
// pause.go (pause and resume), snapshot.go (snapshots and forks),
// template.go (templates), recover.go
// (taking sandboxes back after a daemon restart), workspace.go and
// image.go (volumes and root images), imagebuild*.go (CreateImage: every
// image made in a builder microVM), internal.go (the engine's own VMs),
// jail.go (the VMM's jail), diskcap.go
// (the disk cap on paused images and snapshots), netstate.go (a sandbox's
// network state on disk), observe_vm.go and logread.go (events, logs,
// capacity).
package engine
