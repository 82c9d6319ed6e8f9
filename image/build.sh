#!/usr/bin/env bash
# Builds build/rootfs.ext4, the guest's read-only root file system: Debian
# bookworm (debootstrap minbase) with python3 and the data-science packages in
# image/packages.txt (nodejs among them, for JavaScript cells), trimmed,
# byte-compiled, with matplotlib's font cache pre-built, TypeScript's
# transpiler (image/typescript.sh) in /opt/cellvm/node_modules/typescript,
# plus the repository's image/files/ tree copied onto the root.
#
# The image is mounted read-only by the guest; the guest init puts its own
# writable overlay on top. Nothing may need writing at first use that could
# have been written here (bytecode, font cache).
#
# Two cached stages under ${CELLVM_CACHE:-$HOME/.cache/cellvm}/image/:
#   base/<base key>/root  the Debian tree (minutes: debootstrap, apt);
#                         base key = sha256(this script, packages.txt,
#                         manifest/modules.txt, manifest/collect.py,
#                         typescript.sh (its pin), mirror)
#   <key>/rootfs.ext4     base + image/files/ + $CELLVM_IMAGE_EXTRA, as ext4
#                         (seconds); key = sha256(base key, both trees)
# so editing image/files/ rebuilds only the second stage, and an unchanged
# input only links the cached image. Downloaded .debs are kept in debs/.
#
# Environment:
#   CELLVM_CACHE        cache root (default $HOME/.cache/cellvm)
#   CELLVM_IMAGE_EXTRA  optional directory copied onto the root after
#                       image/files/ (e.g. built binaries); part of the key
#   CELLVM_MIRROR       Debian mirror (default http://deb.debian.org/debian)
#
# Needs root (debootstrap, chroot, mount namespaces).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pkg_list="$repo/image/packages.txt"
modules_list="$repo/image/manifest/modules.txt"
collect_py="$repo/image/manifest/collect.py"
typescript_sh="$repo/image/typescript.sh"
# Where the image carries TypeScript's transpiler: the Node runtime's
# default CELLVM_TYPESCRIPT is $ts_dir/lib/typescript.js.
ts_dir=/opt/cellvm/node_modules/typescript
# The manifest of the last build, committed: package agent embeds it to tell
# models what is installed. A build that finds it different rewrites it.
repo_manifest="$repo/image/manifest/manifest.json"
out_manifest="$repo/build/rootfs.manifest.json"
files_dir="$repo/image/files"
extra_dir="${CELLVM_IMAGE_EXTRA:-}"
out="$repo/build/rootfs.ext4"
cache_root="${CELLVM_CACHE:-$HOME/.cache/cellvm}/image"
mirror="${CELLVM_MIRROR:-http://deb.debian.org/debian}"
suite=bookworm
# Empty packages that stand in for dependencies nothing in the image uses at
# run time. python3-scipy depends on python3-pythran (an ahead-of-time
# compiler used when scipy is built; scipy never imports it), and pythran
# pulls g++, boost and the Python headers: ~400 MiB of toolchain.
stub_packages=(python3-pythran)

log() { printf '[image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# tree_digest DIR prints one line per entry (type, mode, path, content hash)
# so that renames, mode changes and edits all change the key.
tree_digest() {
	local dir=$1
	[[ -d "$dir" ]] || return 0
	(cd "$dir" && find . -mindepth 1 -printf '%y %m %p %l\n' | LC_ALL=C sort &&
		find . -type f -print0 | LC_ALL=C sort -z | xargs -0r sha256sum)
}

if [[ -n "$extra_dir" && ! -d "$extra_dir" ]]; then
	die "CELLVM_IMAGE_EXTRA=$extra_dir is not a directory"
fi
mapfile -t packages < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$pkg_list")
((${#packages[@]})) || die "$pkg_list lists no packages"

base_key=$( {
	printf 'script\n'; cat "${BASH_SOURCE[0]}"
	printf 'packages\n'; printf '%s\n' "${packages[@]}"
	printf 'modules\n'; cat "$modules_list"
	printf 'collect\n'; cat "$collect_py"
	printf 'typescript\n'; cat "$typescript_sh"
	printf 'mirror %s suite %s\n' "$mirror" "$suite"
} | sha256sum | cut -d' ' -f1)
key=$( {
	printf 'base %s\n' "$base_key"
	printf 'files\n'; tree_digest "$files_dir"
	printf 'extra\n'; tree_digest "$extra_dir"
} | sha256sum | cut -d' ' -f1)
base="$cache_root/base/$base_key"
result="$cache_root/$key"

install_result() {
	mkdir -p "$(dirname "$out")"
	rm -f "$out"
	# A hard link is instant; the cached file is read-only and the guest
	# mounts it read-only. Fall back to a copy across file systems.
	ln "$result/rootfs.ext4" "$out" 2>/dev/null || cp "$result/rootfs.ext4" "$out"
	log "build/rootfs.ext4: $(du -h --apparent-size "$out" | cut -f1) (key ${key:0:12}, base ${base_key:0:12})"
	install_manifest
}

# install_manifest puts the image's manifest next to it (build/) and, when
# the committed one differs, rewrites that, saying so: package agent embeds
# it, so the clients' tool definition must be regenerated and both committed.
install_manifest() {
	[[ -f "$result/manifest.json" ]] || die "$result has no manifest.json (built before manifests existed?); remove it and rebuild"
	rm -f "$out_manifest"
	cp "$result/manifest.json" "$out_manifest"
	if ! cmp -s "$result/manifest.json" "$repo_manifest"; then
		cp "$result/manifest.json" "$repo_manifest"
		log "image/manifest/manifest.json CHANGED: the image's packages differ from the committed manifest;"
		log "  run 'go generate ./clients' and commit image/manifest/manifest.json and the tool definitions"
	fi
}

if [[ -f "$result/done" ]]; then
	log "cache hit: $result"
	install_result
	exit 0
fi

((EUID == 0)) || die "building the image needs root (debootstrap, chroot)"
for tool in debootstrap mkfs.ext4 e2fsck chroot unshare; do
	command -v "$tool" >/dev/null || die "$tool missing (run scripts/install-deps.sh)"
done

mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
flock 9
if [[ -f "$result/done" ]]; then
	log "cache hit after waiting for another build: $result"
	install_result
	exit 0
fi

start=$(date +%s)
work="$cache_root/work"
debs="$cache_root/debs"

# stages: print a line when the first word(s) of debootstrap/apt output
# change (Retrieving -> Extracting -> ...), with how many lines the previous
# stage had, instead of one line per package.
stages() {
	# mawk reads its input in blocks unless told otherwise.
	local awk_cmd=(awk)
	if awk -W version 2>&1 | grep -q mawk; then awk_cmd=(awk -W interactive); fi
	"${awk_cmd[@]}" -v t0="$start" '
	function say(msg) { printf "[image %s +%ds] %s\n", strftime("%H:%M:%S"), systime() - t0, msg; fflush() }
	function flush_stage() { if (n > 1) say("  ... " n " lines of \"" cur "\"") }
	{
		st = ""
		if ($0 ~ /^I: (Retrieving|Validating) /) st = "I: Retrieving/Validating"
		else if (match($0, /^I: (Extracting|Unpacking|Configuring|Installing) /)) st = substr($0, 1, RLENGTH - 1)
		else if ($0 ~ /^Get:[0-9]/) st = "Get"
		else if ($0 ~ /^(Selecting previously|Preparing to unpack|Unpacking) /) st = "Unpacking"
		else if (match($0, /^(Setting up|Processing triggers)/)) st = substr($0, 1, RLENGTH)
		if (st == "") { flush_stage(); cur = ""; n = 0; say($0); next }
		if (st != cur) { flush_stage(); say($0); cur = st; n = 0 }
		n++
	}
	END { flush_stage() }' >&2
}

# in_root ROOT CMD... runs CMD chrooted into ROOT, with /proc mounted and the
# persistent .deb cache bound over apt's archive directory. The mounts live
# in a private mount namespace that dies with the command, so an interrupted
# build leaves nothing mounted.
in_root() {
	unshare -m --propagation private sh -c '
		root=$1 debs=$2; shift 2
		mount -t proc proc "$root/proc" &&
		mount --bind "$debs" "$root/var/cache/apt/archives" &&
		exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
			DEBIAN_FRONTEND=noninteractive chroot "$root" "$@"
	' in_root "$1" "$debs" "${@:2}"
}

# install_stubs ROOT builds and installs (held) the stub_packages.
install_stubs() {
	local root=$1 pkg dir
	for pkg in "${stub_packages[@]}"; do
		dir="$root/tmp/cellvm-stub/$pkg"
		mkdir -p "$dir/DEBIAN"
		cat >"$dir/DEBIAN/control" <<-EOF
			Package: $pkg
			Version: 999:0+cellvm.stub
			Architecture: all
			Maintainer: cellvm image builder <nobody@invalid>
			Description: empty stand-in installed by cellvm's image/build.sh
			 The real package is not needed at run time in the guest image.
		EOF
		in_root "$root" dpkg-deb --root-owner-group -b "/tmp/cellvm-stub/$pkg" "/tmp/cellvm-stub/$pkg.deb" >/dev/null ||
			die "building stub package $pkg failed"
		in_root "$root" dpkg -i "/tmp/cellvm-stub/$pkg.deb" >/dev/null || die "installing stub $pkg failed"
		in_root "$root" apt-mark hold "$pkg" >/dev/null
		log "stub package: $pkg"
	done
	rm -rf "$root/tmp/cellvm-stub"
}

# build_base ROOT: debootstrap, packages, trimming, caches, guest layout.
build_base() {
	local root=$1
	mkdir -p "$root" "$debs/partial"

	log "debootstrap --variant=minbase $suite from $mirror"
	unshare -m --propagation private \
		debootstrap --variant=minbase --cache-dir="$debs" "$suite" "$root" "$mirror" 2>&1 | stages
	[[ ${PIPESTATUS[0]} == 0 ]] || die "debootstrap failed"
	log "debootstrap done after $(($(date +%s) - start))s"

	cat >"$root/etc/apt/sources.list" <<-EOF
		deb $mirror $suite main
		deb $mirror $suite-updates main
		deb ${mirror%/debian}/debian-security $suite-security main
	EOF
	cp /etc/resolv.conf "$root/etc/resolv.conf"
	printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
	chmod 755 "$root/usr/sbin/policy-rc.d"
	printf 'Dpkg::Use-Pty "0";\nAPT::Install-Recommends "0";\n' >"$root/etc/apt/apt.conf.d/90cellvm"

	log "apt-get install: ${packages[*]}"
	in_root "$root" apt-get -q update 2>&1 | stages
	[[ ${PIPESTATUS[0]} == 0 ]] || die "apt-get update failed"
	in_root "$root" apt-get -q -y -o Dpkg::Progress-Fancy=0 dist-upgrade 2>&1 | stages
	[[ ${PIPESTATUS[0]} == 0 ]] || die "apt-get dist-upgrade failed"
	install_stubs "$root"
	in_root "$root" apt-get -q -y -o Dpkg::Progress-Fancy=0 install "${packages[@]}" 2>&1 | stages
	[[ ${PIPESTATUS[0]} == 0 ]] || die "apt-get install failed"
	log "packages installed after $(($(date +%s) - start))s"

	log "trimming: apt lists, docs, man pages, locales, logs, test suites"
	rm -f "$root/usr/sbin/policy-rc.d" "$root/etc/apt/apt.conf.d/90cellvm"
	rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin \
		"$root"/var/cache/debconf/*-old "$root"/var/lib/dpkg/*-old \
		"$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
		"$root"/usr/share/locale/* "$root"/usr/share/lintian "$root"/usr/share/bug \
		"$root"/var/log/* "$root"/tmp/* "$root"/var/tmp/*
	# Upstream test suites: large, never imported by the libraries themselves.
	find "$root/usr/lib/python3/dist-packages" -depth -type d -name tests \
		\( -path '*/numpy/*' -o -path '*/scipy/*' -o -path '*/pandas/*' -o -path '*/matplotlib/*' \
		-o -path '*/sklearn/*' -o -path '*/statsmodels/*' -o -path '*/sympy/*' -o -path '*/networkx/*' \) \
		-exec rm -rf {} +

	log "pre-building matplotlib's font cache and compiling bytecode"
	# Two caches: root's default (~/.cache/matplotlib) and a shared one for an
	# interpreter started with MPLCONFIGDIR=/var/cache/matplotlib.
	mkdir -p "$root/var/cache/matplotlib"
	chmod 1777 "$root/var/cache/matplotlib"
	in_root "$root" python3 -c 'import matplotlib.pyplot' ||
		die "importing matplotlib.pyplot failed in the image"
	in_root "$root" env MPLCONFIGDIR=/var/cache/matplotlib \
		python3 -c 'import matplotlib.pyplot, numpy, pandas, scipy, IPython, PIL' ||
		die "importing the data-science stack failed in the image"
	ls "$root/root/.cache/matplotlib/"fontlist-*.json "$root/var/cache/matplotlib/"fontlist-*.json >/dev/null ||
		die "matplotlib font cache was not written"
	# Anything not yet compiled by the packages' postinst (py3compile). Test
	# data with deliberate syntax errors fails to compile; that is expected.
	in_root "$root" python3 -m compileall -q -j2 /usr/lib/python3/dist-packages /usr/lib/python3.11 \
		>/dev/null 2>&1 || true
	log "$(find "$root/usr/lib" -name '*.pyc' | wc -l) .pyc files for $(find "$root/usr/lib" -name '*.py' | wc -l) .py files"

	log "typescript $("$typescript_sh" --print-version) in $ts_dir"
	mkdir -p "$root$ts_dir/lib"
	cp "$repo/build/typescript/package/package.json" "$repo/build/typescript/package/LICENSE.txt" "$root$ts_dir/"
	cp "$repo/build/typescript/package/lib/typescript.js" "$root$ts_dir/lib/"
	chmod -R u=rwX,go=rX "$root/opt/cellvm/node_modules"

	log "manifest: the featured modules (image/manifest/modules.txt), imported, with every distribution's version"
	mkdir -p "$root/tmp/cellvm-manifest"
	cp "$modules_list" "$collect_py" "$root/tmp/cellvm-manifest/"
	in_root "$root" env MPLCONFIGDIR=/var/cache/matplotlib MPLBACKEND=Agg python3 -B /tmp/cellvm-manifest/collect.py \
		/tmp/cellvm-manifest/modules.txt /etc/cellvm-manifest.json || die "writing the image manifest failed"
	rm -rf "$root/tmp/cellvm-manifest"
	log "manifest: $(grep -c '"import"' "$root/etc/cellvm-manifest.json") featured modules"
	# The default image has every cell language; collect.py leaves out one
	# whose program is missing or does not run, which here is a failure.
	local lang
	for lang in python javascript typescript bash; do
		grep -q "\"name\": \"$lang\"" "$root/etc/cellvm-manifest.json" ||
			die "the image's manifest lists no $lang (collect.py found no working program for it)"
	done
	log "manifest: languages $(in_root "$root" python3 -c 'import json,sys; print(", ".join(l["name"]+" "+l["version"] for l in json.load(open(sys.argv[1]))["languages"]))' /etc/cellvm-manifest.json)"

	log "guest layout: /workspace, /mnt/overlay, /opt/cellvm"
	echo cellvm >"$root/etc/hostname"
	printf '127.0.0.1\tlocalhost\n127.0.1.1\tcellvm\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
	: >"$root/etc/resolv.conf" # the guest init writes it (through the overlay)
	mkdir -p "$root/workspace" "$root/mnt/overlay" "$root/opt/cellvm"
}

rm -rf "$work"
mkdir -p "$work"
if [[ -f "$base/done" ]]; then
	log "cache miss (key ${key:0:12}); base tree cached (${base_key:0:12})"
else
	log "cache miss (key ${key:0:12}, base ${base_key:0:12}); started $(date '+%Y-%m-%d %H:%M:%S')"
	"$typescript_sh" || die "fetching typescript failed"
	build_base "$work/base"
	# One base at a time: each is ~700 MiB and cheap to rebuild from debs/.
	rm -rf "$cache_root/base"
	mkdir -p "$base"
	mv "$work/base" "$base/root"
	printf 'build_seconds %s\nfinished %s\n' "$(($(date +%s) - start))" "$(date '+%Y-%m-%d %H:%M:%S')" >"$base/done"
	log "base tree done after $(($(date +%s) - start))s"
fi

# The final tree is a hard-link copy of the base (instant, no extra space);
# anything written into it must replace files, never write through a link.
root="$work/root"
cp -al "$base/root" "$root"
log "copying image/files/${extra_dir:+ and $extra_dir} onto the root"
cp -a --remove-destination "$files_dir/." "$root/"
if [[ -n "$extra_dir" ]]; then cp -a --remove-destination "$extra_dir/." "$root/"; fi
# A marker that says which build this is, readable from inside the guest.
rm -f "$root/etc/cellvm-image"
printf 'key %s\nbase %s\nbuilt %s\nsuite %s\n' "$key" "$base_key" \
	"$(date -u '+%Y-%m-%dT%H:%M:%SZ')" "$suite" >"$root/etc/cellvm-image"

content_kib=$(du -sxk "$root" | cut -f1)
inodes=$(find "$root" -xdev | wc -l)
# Content + 15% headroom + room for inode tables and metadata.
size_kib=$((content_kib * 115 / 100 + inodes * 256 / 1024 + 32768))
size_kib=$(((size_kib + 1023) / 1024 * 1024))
log "mkfs.ext4: ${content_kib} KiB in $inodes inodes -> $((size_kib / 1024)) MiB image"
uuid=$(printf '%s' "$key" | sed -E 's/^(.{8})(.{4})(.{4})(.{4})(.{12}).*/\1-\2-\3-\4-\5/')
rm -rf "$result.tmp"
mkdir -p "$result.tmp"
mkfs.ext4 -q -F -b 4096 -m 0 -N $((inodes * 11 / 10 + 1024)) -O ^has_journal \
	-L cellvm-root -U "$uuid" -E root_owner=0:0 \
	-d "$root" "$result.tmp/rootfs.ext4" "${size_kib}K" >/dev/null ||
	die "mkfs.ext4 failed"
fsck_out=$(e2fsck -fn "$result.tmp/rootfs.ext4" 2>&1) ||
	{ printf '%s\n' "$fsck_out" >&2; die "e2fsck found errors in the new image"; }
log "e2fsck -fn: clean"
chmod 0444 "$result.tmp/rootfs.ext4"
cp "$root/etc/cellvm-manifest.json" "$result.tmp/manifest.json"

elapsed=$(($(date +%s) - start))
printf 'build_seconds %s\ncontent_kib %s\ninodes %s\nfinished %s\n' \
	"$elapsed" "$content_kib" "$inodes" "$(date '+%Y-%m-%d %H:%M:%S')" >"$result.tmp/done"
rm -rf "$result"
mv "$result.tmp" "$result"
rm -rf "$work"
# Keep one final image: rebuilding another from the cached base takes seconds,
# and each is ~800 MiB. (A build/rootfs.ext4 link keeps its inode alive.)
find "$cache_root" -mindepth 1 -maxdepth 1 -type d -regextype posix-extended \
	-regex '.*/[0-9a-f]{64}(\.tmp)?' ! -name "$key" -exec rm -rf {} +
log "finished $(date '+%Y-%m-%d %H:%M:%S'); build time ${elapsed}s"
install_result
