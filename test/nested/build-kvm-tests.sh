#!/bin/bash
# build-kvm-tests.sh: compiles, on the host, the test binary of every
# package whose tests call kvmtest.Require, into build/rig/, and lists them
# in build/rig/tests.txt for run-kvm-tests.sh. Compiling here rather than in
# the rig matters: code runs about ten times slower under TCG.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
mkdir -p build/rig
: >build/rig/tests.txt
for dir in $(grep -rl --include='*_test.go' 'kvmtest.Require' . | xargs -n1 dirname | sort -u); do
	dir=${dir#./}
	bin=build/rig/$(echo "$dir" | tr / _).test
	CGO_ENABLED=0 go test -c -o "$bin" "./$dir"
	echo "$dir $bin" >>build/rig/tests.txt
done
echo "rig tests: $(wc -l <build/rig/tests.txt) package(s): $(cut -d' ' -f1 build/rig/tests.txt | tr '\n' ' ')"
