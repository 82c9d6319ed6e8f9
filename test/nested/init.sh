#!/bin/sh
# /init of the nested-KVM rig's L1 guest (busybox ash, PID 1).
#
# Why this exists: the host has no /dev/kvm, so tests that need KVM run in an
# L1 VM emulated by QEMU TCG with an AMD-V CPU. This script makes /dev/kvm
# appear (kvm-amd), puts the host's root filesystem (9p, read-only) under a
# tmpfs-backed overlay so it is writable, chroots there, runs the command that
# run.sh packed into /rig/cmd.sh, reports its exit code after CMD's output
# with a per-run nonce, and powers L1 off. Nothing it writes survives L1.
#
# Files provided by the initramfs:
#   /etc/rig-modules   module names, dependency order (built by mkinitramfs.sh)
#   /lib/modules/*.ko  those modules, uncompressed
#   /rig/cmd.sh        per run: env exports, cd, exec of the command
#   /rig/nonce         per run: token that makes the end marker unforgeable

PATH=/bin
export PATH

mount -t devtmpfs devtmpfs /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
# Raw newlines: the host log gets "\n", not "\r\n".
stty -F /dev/console -onlcr 2>/dev/null

nonce=$(cat /rig/nonce 2>/dev/null)
t_init=$(cut -d' ' -f1 /proc/uptime)

# step NAME: with cellvm.rigdebug on the kernel command line (run.sh sets it
# when RIG_DEBUG=1), prints the uptime of each setup step.
debug=0
case " $(cat /proc/cmdline) " in *" cellvm.rigdebug "*) debug=1 ;; esac
step() { [ $debug = 1 ] && echo "cellvm-rig: $(cut -d' ' -f1 /proc/uptime) $*"; return 0; }

# finish CODE MESSAGE: prints the end marker and powers off. Never returns.
finish() {
	code=$1
	shift
	[ -n "$*" ] && echo "cellvm-rig: $*"
	t_end=$(cut -d' ' -f1 /proc/uptime)
	printf '\ncellvm-rig-end %s exit=%s init_s=%s start_s=%s end_s=%s\n' \
		"$nonce" "$code" "$t_init" "${t_start:-0}" "$t_end"
	# On the UART, stty waits for the tty to drain (TCSADRAIN); on the
	# virtio port, QEMU may still hold data the host pipe was too full for.
	stty -onlcr 2>/dev/null <&1
	sleep 0.3
	poweroff -f
	sleep 10
	echo o >/proc/sysrq-trigger
}

# Modules: a failure is reported but not fatal here; the command (or the
# /dev/kvm check below) decides whether the run is usable.
while read -r mod; do
	[ -n "$mod" ] || continue
	step "insmod $mod"
	if ! out=$(insmod "/lib/modules/$mod.ko" 2>&1); then
		case "$out" in
		*"File exists"*) ;;
		*) echo "cellvm-rig: insmod $mod failed: $out" ;;
		esac
	fi
done </etc/rig-modules

[ -c /dev/kvm ] || echo "cellvm-rig: warning: /dev/kvm did not appear (no svm in L1 CPU?)"

# CMD's output goes to a virtio-serial port (named cellvm.out) when there is
# one: the emulated 8250 UART moves only about 55 KB/s under TCG, and hvc0
# (16-byte writes) is slower still; the port takes page-sized writes. run.sh
# muxes it and ttyS0 onto its stdout; kernel messages stay on ttyS0. The end
# marker follows CMD's output on the same stream, so it cannot overtake it.
# virtio_port NAME: the device node of the virtio-serial port named NAME
# (printed), or nothing when L1 has no such port. The ports appear shortly
# after the driver loads.
virtio_port() {
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		for f in /sys/class/virtio-ports/*/name; do
			[ -r "$f" ] && [ "$(cat "$f")" = "$1" ] || continue
			p=${f%/name}
			p=/dev/${p##*/}
			[ -c "$p" ] && { echo "$p"; return 0; }
		done
		sleep 0.1
	done
	return 1
}
out_port=$(virtio_port cellvm.out)
if [ -n "$out_port" ]; then
	exec >"$out_port" 2>&1
	step "output on $out_port"
fi

# The heartbeat: a line every 5 s on its own port (cellvm.hb), from a process
# outside the chroot that nothing in the tests touches. run.sh kills L1 when
# it stops (RIG_HEARTBEAT): the emulator has wedged L1 as a whole (both vCPUs
# gone, no soft-lockup report either), and waiting out RIG_STALL's silence
# cost 600 s an attempt. A test that hangs while L1 lives keeps the heartbeat
# going and is left to the test's own timeouts and RIG_STALL.
hb_port=$(virtio_port cellvm.hb)
if [ -n "$hb_port" ]; then
	printf '#!/bin/sh\nwhile :; do echo "hb $(cut -d" " -f1 /proc/uptime) $(cut -d" " -f1-3 /proc/loadavg)"; sleep 5; done\n' >/bin/rig-heartbeat
	chmod 755 /bin/rig-heartbeat
	/bin/rig-heartbeat >"$hb_port" 2>/dev/null </dev/null &
	step "heartbeat on $hb_port"
fi

step "mount host root"
mkdir -p /host /rw /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288,cache=loose hostroot /host ||
	finish 125 "cannot mount host root over 9p"
mount -t tmpfs -o mode=0755 rw /rw
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work /newroot ||
	finish 125 "cannot mount overlay on host root"

step "mount inside the chroot"
R=/newroot
mount -t proc proc $R/proc
mount -t sysfs sysfs $R/sys
mount -t cgroup2 cgroup2 $R/sys/fs/cgroup 2>/dev/null
mount -t devtmpfs devtmpfs $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts $R/dev/pts
[ -e $R/dev/ptmx ] || ln -s pts/ptmx $R/dev/ptmx
# devtmpfs has no /dev/fd: bash's process substitution needs it.
[ -e $R/dev/fd ] || ln -s /proc/self/fd $R/dev/fd
mount -t tmpfs -o mode=1777 shm $R/dev/shm
mount -t tmpfs -o mode=0755 run $R/run
# /tmp: the host's /tmp stays visible (read through 9p, writes to the tmpfs
# upper layer), so binaries built into /tmp on the host can be run here.

ip link set lo up 2>/dev/null
hostname cellvm-rig

# The kernel loads modules on demand (veth, tun, netfilter) by running
# kernel.modprobe in init's root, which is this initramfs with no modules:
# point it at a helper that runs the host's modprobe inside the chroot.
printf '#!/bin/sh\nexec /bin/chroot %s /sbin/modprobe "$@"\n' "$R" >/bin/rig-modprobe
chmod 755 /bin/rig-modprobe
echo /bin/rig-modprobe >/proc/sys/kernel/modprobe
# /dev/net/tun appears only once tun is loaded, and opening the missing
# node cannot trigger the load: load it (and veth) up front.
/bin/rig-modprobe -a tun veth 2>/dev/null

mkdir -p $R/.cellvm-rig
cp /rig/cmd.sh $R/.cellvm-rig/cmd.sh

# The command, and so every KVM_RUN of every L2 vCPU, runs on CPUs 1..N-1,
# never on CPU 0. QEMU's TCG (10.0.2, the rig's) clears IGNNE on every
# FPU-environment restore (FLDENV, FRSTOR, FXRSTOR, XRSTOR: each context
# switch) by a plain read-modify-write of the *first* vCPU's hflags2, from
# whichever vCPU thread runs it. When CPU 0 is entering or leaving an L2
# guest at that moment, the write-back puts back the nested-paging and GIF
# bits that VMRUN or #VMEXIT had just changed. Seen in the rig
# (2026-12-02, an instrumented QEMU): #VMEXIT ended with nested paging
# still on, the next exit in L1's own code saved L1's registers as the
# guest's, and "L2" then ran L1's code at __svm_vcpu_run+0x9c: the hangs
# and triple faults of this rig's history, and a stuck GIF would also
# explain L1's wedges and its IPI taken inside VMRUN. CPU 0's flags are
# only that race's victim when CPU 0 runs guests, so here it does not.
# cellvm.nopin (RIG_PIN=0) turns this off, to measure it.
ncpu=$(grep -c '^processor' /proc/cpuinfo)
pin=""
case " $(cat /proc/cmdline) " in
*" cellvm.nopin "*) ;;
*) if [ "$ncpu" -ge 3 ]; then pin="taskset -c 1-$((ncpu - 1))"; elif [ "$ncpu" = 2 ]; then pin="taskset -c 1"; fi ;;
esac
step "command pinned: ${pin:-no}"

t_start=$(cut -d' ' -f1 /proc/uptime)
echo "cellvm-rig-start $nonce uptime=$t_start"
env -i $pin chroot $R /bin/sh /.cellvm-rig/cmd.sh </dev/null
finish $? ""
