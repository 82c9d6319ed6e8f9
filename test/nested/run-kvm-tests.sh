#!/bin/bash
# run-kvm-tests.sh: runs, inside the nested rig, the test binaries that
# `make test-rig` compiled on the host (listed in build/rig/tests.txt as
# "<package dir> <binary> [<regexp>]"), each in its package directory, so
# tests that need /dev/kvm run for real; with a regexp, only the tests it
# matches (the KVM tests; CELLVM_TEST_RUN overrides it). Exits non-zero if
# any binary fails.
# CELLVM_RIG_LIST names another list (tests of this script use it);
# CELLVM_RIG_PASSED names a file of "<package dir> <TestName>" lines to skip
# (test-rig.sh writes it when a fresh L1 takes over from a wedged one);
# CELLVM_RIG_REAP=0 leaves VMM processes alone after a package.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
list=${CELLVM_RIG_LIST:-$repo/build/rig/tests.txt}
[[ -f $list ]] || { echo "run-kvm-tests: $list is missing (make test-rig builds it)" >&2; exit 2; }
export CELLVM_RIG=1 CELLVM_BUILD=$repo/build
failed=()
flaky=()
log=$(mktemp)
# run_tests DIR BIN [ARGS...]: one test binary in its package directory, its
# output on stdout and in $log.
run_tests() {
	local dir=$1 bin=$2
	shift 2
	[[ $bin == /* ]] || bin=$repo/$bin
	(cd "$repo/$dir" && "$bin" -test.v -test.timeout "${CELLVM_TEST_TIMEOUT:-40m}" "$@" </dev/null) 2>&1 | tee "$log"
}
want=0
finished=0
while read -r dir bin only; do
	[[ -n $dir ]] || continue
	want=$((want + 1))
	echo "=== rig: $dir"
	start=$(date +%s)
	run=${CELLVM_TEST_RUN:-$only}
	args=(${run:+-test.run "$run"} ${CELLVM_TEST_COUNT:+-test.count "$CELLVM_TEST_COUNT"})
	# Tests that passed in an earlier L1 of the same make test-rig (see
	# test-rig.sh) are skipped, and the skip is said.
	if [[ -n ${CELLVM_RIG_PASSED:-} && -s $CELLVM_RIG_PASSED ]]; then
		done_tests=($(awk -v d="$dir" '$1 == d { print $2 }' "$CELLVM_RIG_PASSED"))
		if ((${#done_tests[@]})); then
			echo "=== rig: $dir: skipping what passed in an earlier L1: ${done_tests[*]}"
			args+=(-test.skip "^($(IFS='|'; echo "${done_tests[*]}"))\$")
		fi
	fi
	if run_tests "$dir" "$bin" "${args[@]}"; then
		echo "=== rig: $dir ok ($(( $(date +%s) - start ))s)"
	else
		# The emulated AMD-V under TCG has bugs of its own (a guest was
		# seen to take a double fault at its syscall entry, which no VMM
		# can cause; a few percent of L2 boots triple-fault or hang, QEMU's
		# own included): failed tests run again, up to CELLVM_RIG_RERUN
		# times (default 3; 0 turns reruns off), and a later pass is
		# reported as FLAKY, never hidden. A test that fails every time
		# fails the run. A test binary that timed out is not rerun.
		# (No process substitution: it needs /dev/fd, which L1 once lacked;
		# the script then skipped its own verdict.)
		reruns=${CELLVM_RIG_RERUN:-3}
		[[ $reruns =~ ^[0-9]+$ ]] || reruns=3
		tests=($(sed -n 's/^--- FAIL: \(Test[^ ]*\) .*/\1/p' "$log" | sort -u))
		first=("${tests[@]}")
		ok=0
		runs=1
		while ((${#tests[@]} && runs <= reruns)) && ! grep -q '^panic: test timed out' "$log"; do
			re="^($(IFS='|'; echo "${tests[*]}"))\$"
			echo "=== rig: $dir: ${tests[*]} failed; rerun $runs of $reruns, to tell a flaky emulator from a bug"
			runs=$((runs + 1))
			if run_tests "$dir" "$bin" -test.run "$re"; then
				ok=1
				break
			fi
			tests=($(sed -n 's/^--- FAIL: \(Test[^ ]*\) .*/\1/p' "$log" | sort -u))
		done
		if ((ok)); then
			echo "=== rig: $dir ok after $((runs - 1)) rerun(s); FLAKY: ${first[*]} ($(( $(date +%s) - start ))s)"
			flaky+=("$dir:${first[*]}")
		else
			echo "=== rig: $dir FAILED, in $runs run(s): ${tests[*]:-the test binary} ($(( $(date +%s) - start ))s)"
			failed+=("$dir")
		fi
	fi
	# A VMM a failed test left behind would eat the memory the next
	# package's guests need: report it, and stop it.
	# Only inside the rig, where nothing else runs VMMs: on a host (this
	# script's own tests set CELLVM_RIG_REAP=0) another package's tests may.
	if [[ ${CELLVM_RIG_REAP:-1} != 0 ]] && left=$(pgrep -a -f '[ ]vmm --config'); then
		echo "=== rig: $dir left VMM processes behind:"; echo "$left"
		pkill -KILL -f '[ ]vmm --config'
		failed+=("$dir(leftovers)")
	fi
	# L1's page migration and compaction so far: moving the pages behind an
	# L2 guest's memory makes L1's KVM rewrite the nested page tables that
	# the emulated AMD-V walks (see README.md here, on huge pages).
	echo "=== rig: L1 vmstat after $dir: $(awk '$1 ~ /^(compact_stall|compact_daemon_wake|compact_migrate_scanned|pgmigrate_success|pgmigrate_fail|thp_collapse_alloc|thp_split_page)$/ { printf "%s=%s ", $1, $2 }' /proc/vmstat 2>/dev/null)"
	finished=$((finished + 1))
done <"$list"
# Fail safe: a package whose iteration did not reach its end (an error in
# this script) must not pass silently.
if ((finished != want)); then
	echo "rig: only $finished of $want test packages reached a verdict"
	failed+=("run-kvm-tests.sh")
fi
if ((${#failed[@]})); then
	# What the L1 kernel saw (OOM kills, lockups, KVM complaints) and the
	# memory left: the first things to look at when a guest hung or died.
	echo "=== rig: L1 memory"; free -m
	echo "=== rig: L1 kernel log (filtered)"
	dmesg 2>/dev/null | grep -iE 'oom|killed process|lockup|hung|blocked for|kvm|segfault|traps:|warn' | tail -n 40
	echo "rig: FAILED: ${failed[*]}"
	exit 1
fi
if ((${#flaky[@]})); then
	echo "rig: FLAKY (failed once, passed on the rerun): ${flaky[*]}"
fi
echo "rig: all KVM tests passed"
