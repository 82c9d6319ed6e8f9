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
#
# RIG_SUITE=core (the default; `make test`) leaves out the extended tier
# listed in extended-tests.txt here; RIG_SUITE=full (`make test-rig-full`)
# runs it too.
#
# The tests listed in race-tests.txt here run from a second binary of their
# package built with -race, and only from it: tests.txt gets a line for it
# after the package's plain one, whose regexp leaves them out.
set -euo pipefail
suite=${RIG_SUITE:-core}
case $suite in
core | full) ;;
*) echo "build-kvm-tests: RIG_SUITE must be core or full, got '$suite'" >&2; exit 2 ;;
esac
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
mkdir -p build/rig
: >build/rig/tests.txt
extended=$(sed 's/#.*//' test/nested/extended-tests.txt | awk 'NF { print $1 }')
races=$(sed 's/#.*//' test/nested/race-tests.txt | awk 'NF { print $1, $2 }')
left_out=0
found=""
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
	found+="$names"$'\n'
	if [[ $suite == core ]]; then
		all=$(echo "$names" | wc -l)
		names=$(echo "$names" | grep -vxF -f <(echo "$extended") || true)
		left_out=$((left_out + all - $(echo -n "$names" | grep -c . || true)))
		[[ -n $names ]] || continue
	fi
	raced=$(awk -v d="$dir" '$1 == d { print $2 }' <<<"$races" | grep -xF -f <(echo "$names") || true)
	plain=$(echo "$names" | grep -vxF -f <(echo "$raced") || true)
	bin=build/rig/$(echo "$dir" | tr / _).test
	if [[ -n $plain ]]; then
		CGO_ENABLED=0 go test -c -o "$bin" "./$dir"
		echo "$dir $bin ^($(echo $plain | tr ' ' '|'))\$" >>build/rig/tests.txt
	fi
	if [[ -n $raced ]]; then
		CGO_ENABLED=1 go test -race -c -o "${bin%.test}.race.test" "./$dir"
		echo "$dir ${bin%.test}.race.test ^($(echo $raced | tr ' ' '|'))\$" >>build/rig/tests.txt
	fi
done
# A name in extended-tests.txt that is no KVM test (a typo, a rename) would
# quietly leave nothing out: refuse it.
for name in $extended; do
	if ! grep -qxF "$name" <<<"$found"; then
		echo "build-kvm-tests: extended-tests.txt names $name, which is no KVM test (*_kvm_test.go, TestRig*)" >&2
		exit 1
	fi
done
# Likewise a name in race-tests.txt that is no KVM test of its package.
while read -r dir name; do
	[[ -n $dir ]] || continue
	if ! sed -n 's/^func \(Test[A-Za-z0-9_]*\)(t \*testing\.T).*/\1/p' "$dir"/*_kvm_test.go 2>/dev/null | grep -qxF "$name"; then
		echo "build-kvm-tests: race-tests.txt names $dir $name, which is no KVM test of $dir (*_kvm_test.go)" >&2
		exit 1
	fi
done <<<"$races"
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
# The image tests (TestImage*) need what L1, which has no network, cannot
# fetch: a python:slim-like root layer made by debootstrap and a snapshot
# of Debian's mirror for apt in a builder VM. rig-fixtures.sh makes them
# here, cached (minutes the first time only), into build/rig/fixtures/.
# The images themselves are made in the rig: every build runs in a builder
# microVM, which needs KVM.
if grep -q 'TestImage' build/rig/tests.txt; then
	log=build/rig/fixtures.log
	if ! test/nested/rig-fixtures.sh >"$log" 2>&1; then
		tail -n 30 "$log" >&2
		echo "build-kvm-tests: test/nested/rig-fixtures.sh failed (above; all of it in $log): the TestImage* tests need its files" >&2
		exit 1
	fi
	echo "rig fixtures: $(tail -n 1 "$log")"
fi
echo "rig tests ($suite): $(wc -l <build/rig/tests.txt) test binaries: $(cut -d' ' -f2 build/rig/tests.txt | xargs -n1 basename | tr '\n' ' ')"
if [[ $suite == core ]]; then
	echo "rig tests: $left_out test(s) of the extended tier left out (test/nested/extended-tests.txt; make test-rig-full runs them)"
fi
