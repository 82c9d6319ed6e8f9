#!/bin/bash
# rig-fixtures.sh: prepares, on the host, what the rig's image tests need
# from Debian and cannot fetch in L1, which has no network. Everything is
# cached under ${CELLVM_CACHE:-$HOME/.cache/cellvm}/rig-fixtures/ and
# linked (or copied) into build/rig/fixtures/, where the tests find it
# (kvmtest.BuildFile("rig/fixtures/...")):
#
#   pyslim.tar, pyslim.tar.gz   `debootstrap --variant=minbase
#       --include=python3 bookworm`, trimmed (apt lists, caches, docs, man
#       pages, logs): the root layer of an image like python:slim (Python
#       3.11, no numpy), packed with numeric owners and xattrs. The .gz is
#       the layer the tests push (gzip -1), so nothing in L1 compresses
#       100 MiB under emulation. pyslim.os-release is its /etc/os-release.
#       Key: sha256 of this script, the mirror and the suite (minutes, once).
#   debian/   a snapshot of the mirror for apt in a builder VM: the real,
#       signed dists/bookworm/InRelease, main/binary-amd64/Packages.xz and
#       main/i18n/Translation-en.xz (also at their by-hash paths when the
#       Release says Acquire-By-Hash),
#       and the .debs of jq and its dependencies (computed from Packages:
#       the closure of Depends and Pre-Depends, less the packages of a
#       minbase root, which the default image has too) at their pool/
#       paths. apt in the guest checks all of it with Debian's own keys.
#       Refreshed only when missing (rm -rf the cache directory to renew).
#
# Environment: CELLVM_CACHE, CELLVM_MIRROR (default
# http://deb.debian.org/debian, as image/build.sh). Needs root
# (debootstrap) and the network, the first time only. Idempotent; a
# failed step says which and leaves no half-made cache entry.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mirror=${CELLVM_MIRROR:-http://deb.debian.org/debian}
mirror=${mirror%/}
suite=bookworm
arch=amd64
packages=(jq)
# The index files apt-get update fetches (a missing Translation is an
# error to it, not a warning).
targets=(main/binary-$arch/Packages.xz main/i18n/Translation-en.xz)
cache=${CELLVM_CACHE:-$HOME/.cache/cellvm}/rig-fixtures
out=$repo/build/rig/fixtures
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

log() { printf '[rig-fixtures %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

mkdir -p "$cache" "$out"
exec 9>"$cache/.lock"
flock 9

# place SRC DST: a hard link when the cache and build/ share a file
# system, else a copy; replaces DST.
place() {
	rm -rf "$2"
	cp -al "$1" "$2" 2>/dev/null || cp -a "$1" "$2"
}

fetch() { # fetch URL FILE
	curl -fsSL --retry 3 --connect-timeout 20 -o "$2.part" "$1" || die "download of $1 failed"
	mv "$2.part" "$2"
}

# ---- pyslim: a python:slim-like root layer from Debian's packages ----
# build_pyslim DIR makes DIR/{pyslim.tar,pyslim.tar.gz,pyslim.os-release,
# packages.txt}; its own text is the cache key, so editing the rest of this
# script does not debootstrap again.
build_pyslim() {
	local slim=$1 root=$1/root start
	start=$(date +%s)
	log "pyslim: debootstrap --variant=minbase --include=python3 $suite from $mirror (minutes; cached as $slim)"
	if ! unshare -m --propagation private debootstrap --variant=minbase --include=python3 "$suite" "$root" "$mirror" >"$slim/debootstrap.log" 2>&1; then
		tail -n 30 "$slim/debootstrap.log" >&2
		cp "$slim/debootstrap.log" "$slim.failed.log"
		rm -rf "$slim"
		die "debootstrap failed (above; all of it in $slim.failed.log)"
	fi
	[[ -x $root/usr/bin/python3 && -f $root/etc/issue.net ]] || die "debootstrap made no python3 or /etc/issue.net in $root"
	[[ ! -e $root/usr/lib/python3/dist-packages/numpy ]] || die "$root has numpy: the image must not"
	rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
		"$root"/var/lib/dpkg/*-old "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
		"$root"/var/log/* "$root"/tmp/* "$root"/var/tmp/*
	cp "$root/etc/os-release" "$slim/pyslim.os-release"
	dpkg-query --admindir="$root/var/lib/dpkg" -W -f '${Package}\n' | sort >"$slim/packages.txt"
	tar --numeric-owner --xattrs -C "$root" -cf "$slim/pyslim.tar.part" .
	mv "$slim/pyslim.tar.part" "$slim/pyslim.tar"
	gzip -1 -n -c "$slim/pyslim.tar" >"$slim/pyslim.tar.gz.part"
	mv "$slim/pyslim.tar.gz.part" "$slim/pyslim.tar.gz"
	rm -rf "$root"
	touch "$slim/done"
	log "pyslim: $(du -m "$slim/pyslim.tar" | cut -f1) MiB tar, $(du -m "$slim/pyslim.tar.gz" | cut -f1) MiB gzip, $(wc -l <"$slim/packages.txt") packages, in $(($(date +%s) - start)) s"
}
key=$( {
	declare -f build_pyslim
	printf 'mirror %s suite %s\n' "$mirror" "$suite"
} | sha256sum | cut -c1-16)
slim=$cache/pyslim-$key
if [[ ! -f $slim/done ]]; then
	((EUID == 0)) || die "debootstrap needs root (pyslim.tar, cache key $key)"
	for tool in debootstrap tar gzip unshare dpkg-query; do
		command -v "$tool" >/dev/null || die "$tool is missing: apt-get install debootstrap tar gzip util-linux dpkg"
	done
	rm -rf "$slim"
	mkdir -p "$slim"
	build_pyslim "$slim"
else
	log "pyslim: cache hit ($slim)"
fi
for f in pyslim.tar pyslim.tar.gz pyslim.os-release; do
	place "$slim/$f" "$out/$f"
done

# ---- a Debian mirror snapshot for apt in a builder VM ----
# Keyed by what it is made of (not by the mirror's day: a snapshot, once
# made, stays until its directory is removed).
snap=$cache/debian-$suite-$(printf '%s\n' "$mirror" "$arch" "$key" "${packages[@]}" "${targets[@]}" | sha256sum | cut -c1-16)
if [[ ! -f $snap/done ]]; then
	for tool in curl gpgv xz sha256sum; do
		command -v "$tool" >/dev/null || die "$tool is missing: apt-get install curl gpgv xz-utils coreutils"
	done
	[[ -f $keyring ]] || die "$keyring is missing: apt-get install debian-archive-keyring"
	work=$snap.work
	rm -rf "$work"
	dists=$work/dists/$suite
	mkdir -p "$dists"
	# The index files must be the ones InRelease names; a mirror updating
	# between the downloads gives others: fetch them all again.
	for try in 1 2 3; do
		log "mirror snapshot: $mirror/dists/$suite/InRelease and ${targets[*]} (try $try)"
		fetch "$mirror/dists/$suite/InRelease" "$dists/InRelease"
		gpgv --keyring "$keyring" "$dists/InRelease" 2>"$work/gpgv.log" ||
			{ cat "$work/gpgv.log" >&2; die "$mirror/dists/$suite/InRelease does not verify with $keyring"; }
		stale=""
		for target in "${targets[@]}"; do
			mkdir -p "$dists/$(dirname "$target")"
			fetch "$mirror/dists/$suite/$target" "$dists/$target"
			want=$(awk -v t="$target" '/^SHA256:/ { s = 1; next } /^[^ ]/ { s = 0 } s && $3 == t { print $1 }' "$dists/InRelease")
			[[ -n $want ]] || die "InRelease lists no SHA256 of $target"
			got=$(sha256sum "$dists/$target" | cut -d' ' -f1)
			if [[ $got != "$want" ]]; then
				log "$target is $got, InRelease says $want: the mirror changed in between"
				stale=1
				break
			fi
			# apt asks for .../by-hash/SHA256/<hash> when the Release
			# says Acquire-By-Hash.
			if grep -q '^Acquire-By-Hash: yes' "$dists/InRelease"; then
				mkdir -p "$dists/$(dirname "$target")/by-hash/SHA256"
				ln -f "$dists/$target" "$dists/$(dirname "$target")/by-hash/SHA256/$want"
			fi
		done
		[[ -z $stale ]] && break
		[[ $try == 3 ]] && die "the mirror's index files never matched its InRelease"
		rm -rf "$dists/main"
		sleep 10
	done
	# The closure of the packages' Depends and Pre-Depends (the first of
	# each set of alternatives, versions ignored), less minbase's packages.
	xz -dc "$dists/main/binary-$arch/Packages.xz" >"$work/Packages"
	awk -v want="${packages[*]}" '
		function strip(s) { sub(/^[ \t]+/, "", s); sub(/[ \t(:].*$/, "", s); return s }
		FILENAME == ARGV[1] { base[$1] = 1; next }
		/^Package: / { p = $2 } /^Priority: / { prio[p] = $2 }
		/^Filename: / { file[p] = $2 } /^SHA256: / { sum[p] = $2 }
		/^(Pre-)?Depends: / {
			line = $0; sub(/^[^:]*: /, "", line)
			n = split(line, deps, ",")
			for (i = 1; i <= n; i++) { split(deps[i], alt, "|"); d[p] = d[p] " " strip(alt[1]) }
		}
		END {
			n = split(want, q, " "); for (i = 1; i <= n; i++) seen[q[i]] = 1
			for (i = 1; i <= n; i++) {
				m = split(d[q[i]], ds, " ")
				for (j = 1; j <= m; j++) if (!(ds[j] in seen)) { seen[ds[j]] = 1; q[++n] = ds[j] }
			}
			for (i = 1; i <= n; i++) {
				if (!(q[i] in file)) { print "MISSING " q[i]; continue }
				if (!(q[i] in base)) print q[i], file[q[i]], sum[q[i]]
			}
		}' "$slim/packages.txt" "$work/Packages" >"$work/debs.txt"
	if grep '^MISSING ' "$work/debs.txt" >&2; then
		die "the packages above are not in $suite main (a virtual package? a typo in this script?)"
	fi
	while read -r name file sum; do
		mkdir -p "$work/$(dirname "$file")"
		fetch "$mirror/$file" "$work/$file"
		[[ $(sha256sum "$work/$file" | cut -d' ' -f1) == "$sum" ]] || die "$mirror/$file does not match its SHA256 in Packages"
		log "mirror snapshot: $name ($file)"
	done <"$work/debs.txt"
	rm -f "$work/Packages" "$work/gpgv.log"
	touch "$work/done"
	rm -rf "$snap"
	mv "$work" "$snap"
	log "mirror snapshot: $(cut -d' ' -f1 "$snap/debs.txt" | tr '\n' ' ')in $snap"
else
	log "mirror snapshot: cache hit ($snap: $(cut -d' ' -f1 "$snap/debs.txt" | tr '\n' ' '))"
fi
place "$snap" "$out/debian"
rm -f "$out/debian/done"
# Older cache entries (another script, mirror or package list) go.
for old in "$cache"/pyslim-* "$cache"/debian-$suite-*; do
	[[ -d $old && $old != "$slim" && $old != "$snap" ]] || continue
	log "removing the stale cache entry $old"
	rm -rf "$old"
done
log "fixtures ready in $out"
