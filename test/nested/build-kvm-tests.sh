#!/bin/bash
# build-kvm-tests.sh: compiles, on the host, the test binary of every
# package that has KVM tests, into build/rig/, and lists them in
# build/rig/tests.txt for run-kvm-tests.sh as "<package dir> <binary>
# <regexp>". Compiling here rather than in the rig matters: code runs about
# ten times slower under TCG.
#
# Which tests are KVM tests, by convention: every Test function in a
# *_kvm_test.go file, and every test whose name begins with TestRig. Only
# those run in the rig (the regexp); every other test of the package already
# ran on the host in test-unit, and running it again under TCG (a build, a
# CLI's argument checks) only spent the rig's time.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
mkdir -p build/rig
: >build/rig/tests.txt
for dir in $(find . -path ./build -prune -o -name '*_kvm_test.go' -print | xargs -n1 dirname | sort -u); do
	dir=${dir#./}
	names=$({
		sed -n 's/^func \(Test[A-Za-z0-9_]*\)(t \*testing\.T).*/\1/p' "$dir"/*_kvm_test.go
		sed -n 's/^func \(TestRig[A-Za-z0-9_]*\)(t \*testing\.T).*/\1/p' "$dir"/*_test.go
	} | sort -u)
	if [[ -z $names ]]; then
		echo "build-kvm-tests: $dir has *_kvm_test.go files but no Test functions in them" >&2
		exit 1
	fi
	bin=build/rig/$(echo "$dir" | tr / _).test
	CGO_ENABLED=0 go test -c -o "$bin" "./$dir"
	echo "$dir $bin ^($(echo $names | tr ' ' '|'))\$" >>build/rig/tests.txt
done
# A test that needs KVM but lives outside the convention would skip on the
# host and never run in the rig: refuse that.
stray=$(grep -l --include='*_test.go' -r 'kvmtest\.Require(t)' . --exclude='*_kvm_test.go' --exclude-dir=build || true)
for f in $stray; do
	bad=$(awk '/^func Test/ { name = $2; sub(/\(.*/, "", name) } /kvmtest\.Require\(t\)/ && name !~ /^TestRig/ { print name }' "$f" | sort -u)
	if [[ -n $bad ]]; then
		echo "build-kvm-tests: $f: $bad call(s) kvmtest.Require but are not KVM tests by name or file (*_kvm_test.go, TestRig*): they would never run" >&2
		exit 1
	fi
done
echo "rig tests: $(wc -l <build/rig/tests.txt) package(s): $(cut -d' ' -f1 build/rig/tests.txt | tr '\n' ' ')"
