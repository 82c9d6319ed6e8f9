#!/bin/bash
# run-kvm-tests.sh: runs, inside the nested rig, the test binaries that
# `make test-rig` compiled on the host (listed in build/rig/tests.txt as
# "<package dir> <binary>"), each in its package directory, so tests that
# need /dev/kvm run for real. Exits non-zero if any binary fails.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
list=$repo/build/rig/tests.txt
[[ -f $list ]] || { echo "run-kvm-tests: $list is missing (make test-rig builds it)" >&2; exit 2; }
export CELLVM_RIG=1 CELLVM_BUILD=$repo/build
failed=()
while read -r dir bin; do
	[[ -n $dir ]] || continue
	echo "=== rig: $dir"
	start=$(date +%s)
	if (cd "$repo/$dir" && "$repo/$bin" -test.v -test.timeout 20m ${CELLVM_TEST_RUN:+-test.run "$CELLVM_TEST_RUN"}); then
		echo "=== rig: $dir ok ($(( $(date +%s) - start ))s)"
	else
		echo "=== rig: $dir FAILED ($(( $(date +%s) - start ))s)"
		failed+=("$dir")
	fi
done <"$list"
if ((${#failed[@]})); then
	echo "rig: FAILED: ${failed[*]}"
	exit 1
fi
echo "rig: all KVM tests passed"
