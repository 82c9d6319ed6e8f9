#!/bin/bash
# run.sh [--mem MiB] [--timeout SECONDS] -- CMD [ARGS...]
#
# Runs CMD inside an L1 VM that has a working /dev/kvm, and exits with CMD's
# exit code. Why: this machine is itself a guest without /dev/kvm; QEMU TCG
# with `-cpu max` emulates AMD-V, so Debian's kernel in L1 can load kvm-amd
# (see /work/shared/NESTED-KVM.md). L1 sees the host's root filesystem through
# 9p, read-only, under a tmpfs overlay: everything on the host is visible and
# writable inside, and every write vanishes when L1 powers off.
#
# CMD runs as root in the directory run.sh was called from, with
# PATH, HOME=/root, CELLVM_RIG=1, and these variables passed through when set:
# CELLVM_*, GOTRACEBACK, GODEBUG, GOMAXPROCS, GOFLAGS, TZ, LANG, LC_ALL.
# stdin is /dev/null; stdout and stderr go to a virtio-serial port (not a
# tty). This script streams that port, L1's serial console and QEMU's own
# messages to its stdout; its own report goes to stderr.
#
# Exit codes: CMD's own; 124 when --timeout expired (QEMU is killed);
# 123 when L1 did not start CMD within RIG_BOOT seconds (default 240; 0
# off), printed nothing for RIG_STALL seconds (default 600; 0 off), its
# heartbeat stopped for RIG_HEARTBEAT seconds (default 90; 0 off), or its
# kernel reported a soft lockup of RIG_LOCKUP seconds (default 150; 0 off),
# and was killed; 125 when L1 ended without reporting (crash, panic, setup
# failure);
# 2 for bad usage or missing tools.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=$repo/build/nested

mem=${MEM:-3072}
timeout_s=1500

usage() {
	echo "usage: $0 [--mem MiB] [--timeout SECONDS] -- CMD [ARGS...]" >&2
	exit 2
}
while (($#)); do
	case $1 in
	--mem) (($# >= 2)) || usage; mem=$2; shift 2 ;;
	--mem=*) mem=${1#*=}; shift ;;
	--timeout) (($# >= 2)) || usage; timeout_s=$2; shift 2 ;;
	--timeout=*) timeout_s=${1#*=}; shift ;;
	--) shift; break ;;
	-h | --help) usage ;;
	*) break ;;
	esac
done
(($#)) || usage
[[ $mem =~ ^[0-9]+$ && $mem -ge 512 ]] || { echo "run.sh: --mem wants MiB >= 512, got '$mem'" >&2; exit 2; }
[[ $timeout_s =~ ^[0-9]+$ && $timeout_s -ge 1 ]] || { echo "run.sh: --timeout wants seconds >= 1, got '$timeout_s'" >&2; exit 2; }

# --- tools -----------------------------------------------------------------
missing=()
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
if [[ ! -x /bin/busybox || $(LC_ALL=C ldd /bin/busybox 2>&1 || true) != *"not a dynamic"* ]]; then
	missing+=(busybox-static)
fi
kver=""
for k in $(ls /boot/vmlinuz-* 2>/dev/null | sed 's|^/boot/vmlinuz-||' | sort -V -r); do
	if [[ -d /lib/modules/$k/kernel/arch/x86/kvm ]]; then kver=$k; break; fi
done
[[ -n $kver ]] || missing+=(linux-image-amd64)
command -v modinfo >/dev/null || missing+=(kmod)
if ((${#missing[@]})); then
	echo "run.sh: missing tools; install them with:" >&2
	echo "  apt-get install -y ${missing[*]}" >&2
	exit 2
fi
kernel=/boot/vmlinuz-$kver
[[ -r $kernel ]] || { echo "run.sh: cannot read $kernel (run as root)" >&2; exit 2; }

# --- base initramfs (cached) ------------------------------------------------
mkdir -p "$cache"
key=$( {
	echo "$kver"
	cat "$here/init.sh" "$here/mkinitramfs.sh"
	stat -c '%s %Y' /bin/busybox "$kernel"
} | sha256sum | cut -c1-16)
base=$cache/initramfs-$kver-$key.cpio
# The bzImage is XZ-compressed; inflating it under TCG costs ~7 s per boot.
# The kernel has a PVH entry (CONFIG_PVH), so QEMU can boot the inflated ELF
# directly: extract it once and keep it next to the initramfs.
vmlinux=$cache/vmlinux-$kver-$(stat -c '%s-%Y' "$kernel")
extract_vmlinux() {
	local off
	off=$(LC_ALL=C grep -abo -m1 $'\xfd7zXZ\x00' "$kernel" | head -n1 | cut -d: -f1)
	[[ -n $off ]] || return 1
	# xz stops after the first stream; process substitution, not a pipe,
	# so tail's SIGPIPE cannot fail the extraction under pipefail.
	xz -dc --single-stream < <(tail -c +$((off + 1)) "$kernel") >"$vmlinux.tmp" 2>/dev/null || return 1
	# XEN_ELFNOTE_PHYS32_ENTRY (18) marks the PVH entry point.
	LC_ALL=C readelf -n "$vmlinux.tmp" 2>/dev/null | grep -q 'Xen.*(0x00000012)' || return 1
	mv "$vmlinux.tmp" "$vmlinux"
}
if [[ ! -f $base || ! -f $vmlinux ]]; then
	(
		flock 9
		if [[ ! -f $base ]]; then
			echo "run.sh: building $base" >&2
			"$here/mkinitramfs.sh" "$kver" "$base"
			find "$cache" -maxdepth 1 -name 'initramfs-*.cpio' ! -path "$base" -delete
		fi
		if [[ ! -f $vmlinux && ! -f $vmlinux.none ]]; then
			find "$cache" -maxdepth 1 -name 'vmlinux-*' -delete
			if command -v readelf >/dev/null && command -v xz >/dev/null && extract_vmlinux; then
				echo "run.sh: extracted PVH kernel $vmlinux" >&2
			else
				rm -f "$vmlinux.tmp"
				: >"$vmlinux.none"
				echo "run.sh: no PVH kernel could be extracted from $kernel; booting the bzImage (slower)" >&2
			fi
		fi
	) 9>"$cache/.lock"
fi
[[ -f $vmlinux ]] && boot_kernel=$vmlinux || boot_kernel=$kernel

# --- per-run archive: the command, its directory and environment ------------
work=$(mktemp -d "$cache/run.XXXXXX")
qpid=""
tail_pid=""
cleanup() {
	if [[ -n $qpid ]] && kill -0 "$qpid" 2>/dev/null; then kill -9 "$qpid" 2>/dev/null || true; fi
	if [[ -n $tail_pid ]]; then wait "$tail_pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# q ARG: ARG as one POSIX-shell single-quoted word.
q() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

nonce=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
mkdir -p "$work/root/rig"
{
	echo "# generated by test/nested/run.sh"
	echo "export PATH=$(q /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/go/bin:/usr/lib/go/bin)"
	echo "export HOME=/root CELLVM_RIG=1 TERM=dumb"
	while IFS='=' read -r name _; do
		case $name in
		CELLVM_RIG) ;;
		CELLVM_* | GOTRACEBACK | GODEBUG | GOMAXPROCS | GOFLAGS | TZ | LANG | LC_ALL)
			[[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] && echo "export $name=$(q "${!name}")" ;;
		esac
	done < <(env -0 | tr '\0' '\n' | grep -E '^[A-Za-z_][A-Za-z0-9_]*=' || true)
	echo "cd -- $(q "$PWD") || exit 125"
	printf 'exec'
	for a in "$@"; do printf ' %s' "$(q "$a")"; done
	echo
} >"$work/root/rig/cmd.sh"
printf '%s\n' "$nonce" >"$work/root/rig/nonce"
(cd "$work/root" && printf '%s\n' rig rig/cmd.sh rig/nonce | /bin/busybox cpio -o -H newc -R 0:0 2>/dev/null) >"$work/run.cpio"
cat "$base" "$work/run.cpio" >"$work/initrd"

# --- boot L1 --------------------------------------------------------------
# quiet: the console carries CMD's output. panic=-1 with -no-reboot ends QEMU
# at once on a panic. lpj skips a delay-loop calibration that takes seconds
# under TCG (udelay uses the TSC anyway).
#
# transparent_hugepage=never: with THP, L1 keeps collapsing and splitting the
# huge pages behind L2's memory, and every change makes its KVM rewrite the
# nested page tables that TCG's AMD-V emulation walks; L2 guests crashed far
# more often (a double fault at the syscall entry, triple faults) with it on.
cmdline="console=ttyS0 quiet loglevel=1 panic=-1 oops=panic mitigations=off lpj=8000000 tsc=reliable no_timer_check transparent_hugepage=never"
cmdline+=" ${RIG_L1_ARGS:-}"
if [[ ${RIG_DEBUG:-} == 1 ]]; then
	cmdline="console=ttyS0 loglevel=7 panic=-1 oops=panic mitigations=off lpj=8000000 tsc=reliable no_timer_check transparent_hugepage=never cellvm.rigdebug ${RIG_L1_ARGS:-}"
fi
# RIG_PIN=0: CMD may run on L1's CPU 0 too (init.sh keeps it off CPU 0,
# where a QEMU TCG race corrupts nested guests; see there).
[[ ${RIG_PIN:-1} == 0 ]] && cmdline+=" cellvm.nopin"
# Two output channels, each a file that tail streams to stdout: ttyS0 (kernel
# and early init messages) and a virtio-serial port that carries CMD's output
# and the end marker (the emulated UART moves only ~55 KB/s under TCG). They
# cannot share QEMU's stdio: a mux chardev never tells the port that the host
# side is open, and the guest's writes then block forever.
console=$work/console.log
output=$work/output.log
heartbeat=$work/heartbeat.log
qemu_log=$work/qemu.log
: >"$console"
: >"$output"
: >"$heartbeat"
: >"$qemu_log"
t0=$(date +%s.%N)
qemu-system-x86_64 \
	-accel tcg,thread="${RIG_TCG_THREAD:-multi}" -cpu "${RIG_CPU:-max}" -smp "${RIG_SMP:-3}" -m "$mem" -M pc \
	-nodefaults -no-user-config -display none -monitor none \
	-chardev file,id=ser,path="$console",append=on -serial chardev:ser \
	-device virtio-serial-pci \
	-chardev file,id=out,path="$output",append=on \
	-device virtserialport,chardev=out,name=cellvm.out \
	-chardev file,id=hb,path="$heartbeat",append=on \
	-device virtserialport,chardev=hb,name=cellvm.hb \
	-net none -no-reboot \
	-kernel "$boot_kernel" -initrd "$work/initrd" \
	-append "$cmdline" \
	-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
	</dev/null >"$qemu_log" 2>&1 &
qpid=$!
tail -q -n +1 -F --pid="$qpid" "$qemu_log" "$console" "$output" 2>/dev/null &
tail_pid=$!

t_started=""
timed_out=0
stalled=0
stall_s=${RIG_STALL:-600}
lockup_s=${RIG_LOCKUP:-150}
hb_s=${RIG_HEARTBEAT:-90}
boot_s=${RIG_BOOT:-240}
for v in stall_s lockup_s hb_s boot_s; do
	[[ ${!v} =~ ^[0-9]+$ ]] || { echo "run.sh: RIG_STALL, RIG_LOCKUP, RIG_HEARTBEAT and RIG_BOOT must be whole seconds" >&2; exit 2; }
done
hb_size=0
hb_last=""
loops=0
last_size=-1
last_progress=$t0
peak_kb=0
while kill -0 "$qpid" 2>/dev/null; do
	now=$(date +%s.%N)
	hwm=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$qpid/status" 2>/dev/null || true)
	[[ -n $hwm ]] && peak_kb=$hwm
	if [[ -z $t_started ]] && grep -aq "cellvm-rig-start $nonce" "$output" "$console"; then
		t_started=$now
	fi
	if awk -v a="$now" -v b="$t0" -v t="$timeout_s" 'BEGIN { exit !(a - b >= t) }'; then
		timed_out=1
		kill -9 "$qpid" 2>/dev/null || true
		break
	fi
	# Boot watchdog: L1 boots to CMD in 6-10 s. One was seen to hang in
	# its early boot with every vCPU halted in QEMU (no console line, no
	# heartbeat, QEMU idle): it would wait out RIG_STALL's ten minutes
	# for nothing, where a fresh L1 (test-rig.sh's next attempt) boots.
	if [[ -z $t_started ]] && ((boot_s > 0)) && awk -v a="$now" -v b="$t0" -v t="$boot_s" 'BEGIN { exit !(a - b >= t) }'; then
		stalled=4
		kill -9 "$qpid" 2>/dev/null || true
		break
	fi
	# Stall watchdog: L1 itself was seen to wedge (both vCPUs busy, no
	# output, the test's own timeouts never firing: a process stuck in
	# KVM). Tests print at least every few minutes; silence this long means
	# L1 is gone.
	# Only CMD's channel counts: a wedged L1 keeps printing soft-lockup
	# reports on its console.
	size=$(stat -c %s "$output")
	if [[ $size != "$last_size" ]]; then
		last_size=$size
		last_progress=$now
	elif ((stall_s > 0)) && awk -v a="$now" -v b="$last_progress" -v t="$stall_s" 'BEGIN { exit !(a - b >= t) }'; then
		stalled=1
		kill -9 "$qpid" 2>/dev/null || true
		break
	fi
	# Heartbeat watchdog: init.sh's heartbeat (a line every 5 s, from
	# outside the tests) counts only once it has begun, so L1's boot is not
	# judged by it. When it stops, L1 as a whole is gone: no soft-lockup
	# report comes either, and RIG_STALL would wait 600 s for nothing.
	size=$(stat -c %s "$heartbeat")
	if ((size != hb_size)); then
		hb_size=$size
		hb_last=$now
	elif ((hb_s > 0)) && [[ -n $hb_last ]] && awk -v a="$now" -v b="$hb_last" -v t="$hb_s" 'BEGIN { exit !(a - b >= t) }'; then
		stalled=3
		kill -9 "$qpid" 2>/dev/null || true
		break
	fi
	# A soft lockup that lasts (L1's kernel reports it on the console every
	# ~28 s, with the time stuck) has never been seen to end: waiting out
	# RIG_STALL would only waste minutes. RIG_LOCKUP=0 turns this off.
	loops=$((loops + 1))
	if ((lockup_s > 0 && loops % 10 == 0)); then
		stuck=$(grep -aoE 'soft lockup - CPU#[0-9]+ stuck for [0-9]+s' "$console" 2>/dev/null | sed -E 's/.* ([0-9]+)s$/\1/' | sort -n | tail -n1 || true)
		if [[ -n $stuck ]] && ((stuck >= lockup_s)); then
			stalled=2
			kill -9 "$qpid" 2>/dev/null || true
			break
		fi
	fi
	sleep 0.5
done
wait "$qpid" 2>/dev/null || true
t1=$(date +%s.%N)
# tail exits by itself once QEMU is gone, after printing what is left.
wait "$tail_pid" 2>/dev/null || true

# --- report ---------------------------------------------------------------
marker=$(cat "$output" "$console" | grep -a "^cellvm-rig-end $nonce " | tail -n1 | tr -d '\r' || true)
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", a - b }'; }
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<"$marker"; }
wall=$(secs "$t1" "$t0")
echo
if ((timed_out)); then
	echo "run.sh: TIMEOUT: L1 killed after ${timeout_s}s (--timeout); the command did not finish" >&2
	echo "cellvm-rig: wall ${wall}s, timed out" >&2
	exit 124
fi
if ((stalled == 4)); then
	echo "run.sh: STALLED: L1 did not start the command within ${boot_s}s of QEMU's start (RIG_BOOT; a hung boot; console: $(tail -c 300 "$console" | tr -d '\r' | tr '\n' ' ')); L1 killed" >&2
	echo "cellvm-rig: wall ${wall}s, stalled" >&2
	exit 123
fi
if ((stalled == 3)); then
	echo "run.sh: STALLED: L1's heartbeat stopped ${hb_s}s ago (RIG_HEARTBEAT; last: $(tail -n1 "$heartbeat" | tr -d '\r')); L1 killed" >&2
	echo "cellvm-rig: wall ${wall}s, stalled" >&2
	exit 123
fi
if ((stalled == 2)); then
	echo "run.sh: STALLED: L1's kernel reported a soft lockup of ${stuck}s (RIG_LOCKUP=${lockup_s}); L1 killed" >&2
	echo "cellvm-rig: wall ${wall}s, stalled" >&2
	exit 123
fi
if ((stalled)); then
	echo "run.sh: STALLED: no output from L1 for ${stall_s}s (RIG_STALL); L1 killed" >&2
	echo "cellvm-rig: wall ${wall}s, stalled" >&2
	exit 123
fi
if [[ -z $marker ]]; then
	echo "run.sh: L1 ended without reporting an exit code (kernel panic, crash or setup failure; see console above)" >&2
	echo "cellvm-rig: wall ${wall}s, no result" >&2
	exit 125
fi
rc=$(field exit)
start=$(field start_s)
end=$(field end_s)
boot=$([[ -n $t_started ]] && secs "$t_started" "$t0" || echo "?")
echo "cellvm-rig: exit $rc; wall ${wall}s; L1 boot ${boot}s (QEMU start to CMD start; kernel uptime ${start}s); CMD $(secs "$end" "$start")s; QEMU peak RSS $((peak_kb / 1024))MiB of -m ${mem}MiB" >&2
exit "$rc"
