// Package process is the body of a VMM process: it runs the one machine a
// control.Spec describes, with the files handed to it in the spec's slots,
// until the guest ends or it is stopped, and says why it ended (the End
// report). `cellvm-vmm vmm --config FILE` (the process the daemon starts
// per VM: cmd/cellvm-vmm, a binary of the VMM alone), `cellvm vmm
// --config FILE` (the same, in cellvm) and `cellvm boot` (a machine on the
// terminal) all run it (Main, Run); the command lines only parse flags.
//
// The order is the jail's (package jail), Firecracker's and Cloud
// Hypervisor's: open what a jail hides (the page map, opened so that it
// shows no host frame numbers: pagemap.go), Enter the jail, build the
// machine (Plan, then KVM; a restore puts the devices' state into their
// structs and reads nothing of the guest's rings), serve the control
// socket, then Drop privileges and install the seccomp filter just before
// the guest's first instruction, and only then start a restored machine's
// devices. As the first device is handed its queues, the VMM checks its
// own uid and seccomp mode and logs them ("first queue pop"); a jailed VMM
// that finds itself unjailed stops the VM (selfcheck.go). From there the
// process opens no file and creates no socket: its End report goes to a
// file it was handed.
package process
