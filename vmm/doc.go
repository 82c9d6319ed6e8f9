// Package vmm runs one virtual machine on /dev/kvm: it lays out guest
// memory, loads the kernel and initrd with the Linux boot protocol, sets up
// the in-kernel irqchip and PIT, puts each vCPU on its own locked OS thread,
// dispatches port and MMIO exits to the legacy devices (the 8250 console,
// the i8042 reset line, the boot-time marker) and to virtio-mmio windows,
// and ends the VM when the guest resets or fails.
//
// A guest built without ACPI cannot power off; it ends by rebooting. So a
// reset through the i8042 (reboot=k) is the clean end of a VM, and a triple
// fault, a kernel panic or a KVM internal error is a failure. The VM's end
// and its status come from devices only, never from console text, which
// the guest's user space can write: a panic is a reset with the BIOS
// warm-boot flag set (RebootArgs, panicFlag).
//
// A machine pauses, saves and restores (pause.go, save.go, restore.go,
// layers.go), and one built with Config.Checkpoints logs the pages written
// into its memory so that a checkpoint of it, taken while it runs on,
// writes only those (checkpoint.go).
package vmm
