#!/bin/bash
# selftest.sh [run.sh options]: checks the nested rig itself, without Go.
#
# One L1 boot checks that: /dev/kvm is a char device 10:232; CELLVM_RIG=1;
# the command runs in the caller's directory with its arguments intact
# (spaces, quotes, $, newlines); the host filesystem is writable through the
# overlay, both in the repo's build/ and in a directory that is read-only on
# the host; and, when a C compiler is available, that a KVM guest really runs
# in L1 (kvmprobe.c: out to port 0x3f8, then hlt). Back on the host it checks
# that the overlay writes did not leak out. A second boot freezes L1's
# heartbeat and checks that run.sh kills L1 for it (exit 123) within
# RIG_HEARTBEAT. Prints "rig ok" on success.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=$repo/build/nested
mkdir -p "$out"

probe=""
if command -v cc >/dev/null; then
	cc -O2 -Wall -Wextra -Werror -o "$out/kvmprobe" "$here/kvmprobe.c"
	probe=$out/kvmprobe
else
	echo "selftest: no C compiler; skipping the KVM guest probe" >&2
fi

marker=/usr/.cellvm-rig-selftest.$$
buildfile=$out/.selftest-overlay.$$
rm -f "$buildfile"

# Runs in L1, in the chroot. $1..$4 are the arguments to check.
check='
set -e
fail() { echo "selftest: FAIL: $*"; exit 1; }
[ "$1" = "a b" ] || fail "arg 1: [$1]"
[ "$2" = "it'"'"'s" ] || fail "arg 2: [$2]"
[ "$3" = "\$HOME \`x\` \"q\"" ] || fail "arg 3: [$3]"
[ "$4" = "line1
line2" ] || fail "arg 4: [$4]"
[ "$(pwd)" = "$RIG_WANT_PWD" ] || fail "cwd $(pwd), want $RIG_WANT_PWD"
[ "$CELLVM_RIG" = 1 ] || fail "CELLVM_RIG=[$CELLVM_RIG]"
[ -c /dev/kvm ] || fail "/dev/kvm missing or not a char device"
[ "$(stat -c %t:%T /dev/kvm)" = "a:e8" ] || fail "/dev/kvm is $(stat -c %t:%T /dev/kvm) (hex), want a:e8 (10:232)"
echo overlay >"$RIG_BUILDFILE" || fail "cannot write $RIG_BUILDFILE"
[ "$(cat "$RIG_BUILDFILE")" = overlay ] || fail "read back $RIG_BUILDFILE"
echo overlay >"$RIG_MARKER" || fail "cannot write $RIG_MARKER through the overlay"
echo tmp >/tmp/.cellvm-rig-selftest || fail "cannot write /tmp"
if [ -n "$RIG_PROBE" ]; then "$RIG_PROBE" || fail "kvmprobe"; fi
echo "rig ok"
'

rc=0
"$here/run.sh" "$@" -- env RIG_WANT_PWD="$PWD" RIG_BUILDFILE="$buildfile" \
	RIG_MARKER="$marker" RIG_PROBE="$probe" \
	sh -c "$check" _ "a b" "it's" '$HOME `x` "q"' $'line1\nline2' || rc=$?

if [[ -e $marker || -e $buildfile ]]; then
	echo "selftest: FAIL: overlay writes leaked to the host ($marker or $buildfile exists)" >&2
	rm -f "$buildfile"
	exit 1
fi
if ((rc != 0)); then
	echo "selftest: FAIL: rig exited $rc" >&2
	exit "$rc"
fi

# The heartbeat watchdog: a command that freezes L1's heartbeat (as a wedged
# L1 would) and then waits must be killed within RIG_HEARTBEAT, exit 123 and
# say why, long before its own sleep ends.
hb_err=$out/.selftest-heartbeat.$$
t0=$(date +%s)
hb_rc=0
RIG_HEARTBEAT=15 "$here/run.sh" "$@" -- sh -c 'pkill -STOP -f /bin/rig-heartbeat || exit 3; sleep 600' 2>"$hb_err" >/dev/null || hb_rc=$?
hb_took=$(($(date +%s) - t0))
if ((hb_rc != 123)) || ! grep -q "heartbeat stopped" "$hb_err" || ((hb_took >= 300)); then
	echo "selftest: FAIL: a frozen heartbeat: run.sh exit $hb_rc after ${hb_took}s, want 123 (heartbeat stopped) well before 300s:" >&2
	cat "$hb_err" >&2
	rm -f "$hb_err"
	exit 1
fi
rm -f "$hb_err"
echo "selftest: a frozen heartbeat ended L1 in ${hb_took}s (run.sh exit 123)"
echo "selftest: rig ok"
