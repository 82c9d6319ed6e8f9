// kvmprobe: proves that /dev/kvm works by running four real-mode
// instructions in a one-vCPU VM:
//   mov $0x3f8,%dx; mov $'A',%al; out %al,(%dx); hlt
// and checking that KVM reports the port write and then the HLT.
// The nested rig's selftest builds it with the host's cc and runs it in L1.
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>

static int fail(const char *what) {
	fprintf(stderr, "kvmprobe: %s: %s\n", what, strerror(errno));
	return 1;
}

int main(void) {
	static const uint8_t code[] = {0xba, 0xf8, 0x03, 0xb0, 'A', 0xee, 0xf4};
	const uint64_t guest_addr = 0x1000, mem_size = 0x1000;

	int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (kvm < 0) return fail("open /dev/kvm");
	int api = ioctl(kvm, KVM_GET_API_VERSION, 0);
	if (api != KVM_API_VERSION) {
		fprintf(stderr, "kvmprobe: KVM API version %d, want %d\n", api, KVM_API_VERSION);
		return 1;
	}
	int vm = ioctl(kvm, KVM_CREATE_VM, 0);
	if (vm < 0) return fail("KVM_CREATE_VM");

	uint8_t *mem = mmap(NULL, mem_size, PROT_READ | PROT_WRITE,
			    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) return fail("mmap guest memory");
	memcpy(mem, code, sizeof code);
	struct kvm_userspace_memory_region region = {
		.slot = 0,
		.guest_phys_addr = guest_addr,
		.memory_size = mem_size,
		.userspace_addr = (uint64_t)(uintptr_t)mem,
	};
	if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) < 0)
		return fail("KVM_SET_USER_MEMORY_REGION");

	int vcpu = ioctl(vm, KVM_CREATE_VCPU, 0);
	if (vcpu < 0) return fail("KVM_CREATE_VCPU");
	int run_size = ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE, 0);
	if (run_size < (int)sizeof(struct kvm_run)) return fail("KVM_GET_VCPU_MMAP_SIZE");
	struct kvm_run *run = mmap(NULL, (size_t)run_size, PROT_READ | PROT_WRITE,
				   MAP_SHARED, vcpu, 0);
	if (run == MAP_FAILED) return fail("mmap kvm_run");

	struct kvm_sregs sregs;
	if (ioctl(vcpu, KVM_GET_SREGS, &sregs) < 0) return fail("KVM_GET_SREGS");
	sregs.cs.base = 0;
	sregs.cs.selector = 0;
	if (ioctl(vcpu, KVM_SET_SREGS, &sregs) < 0) return fail("KVM_SET_SREGS");
	struct kvm_regs regs = {.rip = guest_addr, .rflags = 0x2};
	if (ioctl(vcpu, KVM_SET_REGS, &regs) < 0) return fail("KVM_SET_REGS");

	int saw_out = 0;
	for (int i = 0; i < 16; i++) {
		if (ioctl(vcpu, KVM_RUN, 0) < 0) return fail("KVM_RUN");
		switch (run->exit_reason) {
		case KVM_EXIT_IO: {
			const uint8_t *data = (const uint8_t *)run + run->io.data_offset;
			if (run->io.direction != KVM_EXIT_IO_OUT || run->io.port != 0x3f8 ||
			    run->io.size != 1 || run->io.count != 1 || data[0] != 'A') {
				fprintf(stderr, "kvmprobe: unexpected I/O exit: dir %u port %#x size %u\n",
					run->io.direction, run->io.port, run->io.size);
				return 1;
			}
			saw_out = 1;
			break;
		}
		case KVM_EXIT_HLT:
			if (!saw_out) {
				fprintf(stderr, "kvmprobe: HLT before the port write\n");
				return 1;
			}
			printf("kvmprobe: ok: guest wrote 'A' to port 0x3f8, then HLT (API %d)\n", api);
			return 0;
		default:
			fprintf(stderr, "kvmprobe: unexpected exit reason %u\n", run->exit_reason);
			return 1;
		}
	}
	fprintf(stderr, "kvmprobe: no HLT after 16 runs\n");
	return 1;
}
