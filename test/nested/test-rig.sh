#!/bin/bash
# test-rig.sh: what `make test-rig` runs. It runs the KVM tests
# (run-kvm-tests.sh) inside the nested rig (run.sh), within one time budget
# for all attempts together.
#
# Why attempts: the rig's L1 is a Linux guest of QEMU's TCG emulating AMD-V,
# and that emulation sometimes wedges or crashes L1 itself (soft lockups,
# a kernel panic in its page-fault handler; see README.md here). That is the
# emulator's failure, not a test's, so when run.sh reports a wedged, crashed
# or timed-out L1 (exit 123, 125 or 124), a fresh L1 is booted and runs only
# the tests that have not passed yet: every top-level test that printed
# "--- PASS" is listed in build/rig/passed.txt, which run-kvm-tests.sh reads
# (through the rig's read-only view of this file system) and skips. Each
# attempt is said out loud; nothing that failed is hidden. All passed is
# final; tests that failed in every rerun are run once more in a fresh L1,
# and a failure there is final.
#
# Knobs: RIG_BUDGET (seconds for all attempts, default 3300), RIG_ATTEMPTS
# (default 5), RIG_MEM (MiB for L1, default 4096), RIG_TIMEOUT (seconds for
# one attempt, default 2700; an attempt never gets more than what is left of
# the budget), RIG_MIN_ATTEMPT (do not start an attempt with less than this
# left, default 420), RIG_RUN (the rig script, default test/nested/run.sh;
# for testing this script), RIG_STATE (where passed.txt and each attempt's
# log go, default build/rig).
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
budget=${RIG_BUDGET:-3300}
attempts=${RIG_ATTEMPTS:-5}
mem=${RIG_MEM:-4096}
per_attempt=${RIG_TIMEOUT:-2700}
min_attempt=${RIG_MIN_ATTEMPT:-420}
for v in budget attempts mem per_attempt min_attempt; do
	[[ ${!v} =~ ^[0-9]+$ ]] || { echo "test-rig: $v must be a whole number, got '${!v}'" >&2; exit 2; }
done
state=${RIG_STATE:-$repo/build/rig}
passed=$state/passed.txt
mkdir -p "$state"
: >"$passed"
start=$(date +%s)
rc=125
ran=0
confirming=0
for ((attempt = 1; attempt <= attempts; attempt++)); do
	left=$((budget - ($(date +%s) - start)))
	if ((attempt > 1 && left < min_attempt)); then
		echo "test-rig: only ${left}s of the ${budget}s budget (RIG_BUDGET) left; not starting attempt $attempt"
		break
	fi
	limit=$((per_attempt < left ? per_attempt : left))
	log=$state/attempt-$attempt.log
	if ((attempt > 1)); then
		echo "test-rig: attempt $attempt of $attempts in a fresh L1, ${limit}s at most; skipping the $(wc -l <"$passed") test(s) that passed:"
		sed 's/^/  /' "$passed"
	fi
	ran=$attempt
	CELLVM_RIG_PASSED=$passed ${RIG_RUN:-test/nested/run.sh} --mem "$mem" --timeout "$limit" -- test/nested/run-kvm-tests.sh 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	# Top-level passes, by package: run-kvm-tests.sh heads each package's
	# output with "=== rig: DIR".
	awk '/^=== rig: [^ ]+$/ { dir = $3 } /^--- PASS: Test/ && dir != "" { print dir, $3 }' "$log" >>"$passed"
	sort -u -o "$passed" "$passed"
	case $rc in
	123) why="L1 went silent (wedged) and was killed" ;;
	124) why="L1 ran out of time" ;;
	125) why="L1 ended without a result (crashed)" ;;
	1)
		# Tests failed in every rerun in this L1. An L1 the emulator has
		# made sick was seen to fail every guest of a kind (2-vCPU guests
		# hanging or triple-faulting, run after run), so a failure is
		# final only once a fresh L1 has failed it too.
		((confirming)) && break
		confirming=1
		why="tests failed in every rerun in this L1; a fresh L1 runs them once more to confirm" ;;
	*) break ;;
	esac
	echo "test-rig: attempt $attempt of $attempts: $why (run.sh exit $rc)"
done
# What the emulator's flakiness cost, counted, never hidden: fresh L1s
# after a wedged, crashed or timed-out one, and reruns of failed tests
# (run-kvm-tests.sh says "rerun N of M" for each, and "FLAKY" for a test
# that passed on one).
reruns=0
flaky=0
for ((i = 1; i <= ran; i++)); do
	f=$state/attempt-$i.log
	[[ -f $f ]] || continue
	reruns=$((reruns + $(grep -cE '^=== rig: .* failed; rerun [0-9]+ of [0-9]+' "$f")))
	flaky=$((flaky + $(grep -cE '^=== rig: .* ok after [0-9]+ rerun\(s\); FLAKY' "$f")))
done
echo "make test-rig: nested rig took $(($(date +%s) - start))s in $ran attempt(s) (exit $rc); fresh L1s: $((ran > 0 ? ran - 1 : 0)), test reruns: $reruns, packages passed only on a rerun (FLAKY): $flaky"
exit "$rc"
