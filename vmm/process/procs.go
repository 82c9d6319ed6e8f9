package process

import "runtime"

// enoughProcs raises GOMAXPROCS to the machine's vCPUs plus one, if it is
// lower. Each vCPU's thread spends its life in KVM_RUN, a system call
// that holds its P until sysmon takes it back (after 20 µs to 10 ms), and
// the devices' goroutines are woken through the netpoller (the queue
// notifiers, vmm/virtio.go), which needs a P to run them: with every P
// held by a vCPU, a queue notification waits for sysmon. On a host with
// one CPU, or a cgroup that gives the VMM fewer Ps than that, a
// notification took 190 µs (p50) against 7 µs with one P to spare, in a
// host measurement of that shape. Ps beyond the CPUs cost nothing while
// idle.
func enoughProcs(vcpus int) {
	if want := vcpus + 1; runtime.GOMAXPROCS(0) < want {
		runtime.GOMAXPROCS(want)
	}
}
