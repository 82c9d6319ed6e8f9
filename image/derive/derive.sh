#!/usr/bin/env bash
# derive.sh: the steps of `cellvm image build` (package derive runs it; the
# Go side checks the inputs, computes the cache key and puts the result in
# place). It makes a new read-only root image from a base image:
#
#   extract      the base ext4, loop-mounted read-only in a private mount
#                namespace, copied (cp -a: modes, owners, xattrs, links)
#   apt          apt-get update and install of $DERIVE_APT from the mirror
#   pip          pip install of the wheels in $DERIVE_WHEELS and of
#                $DERIVE_REQUIREMENTS, binary wheels only (no setup.py runs
#                on the host), from the wheel directory and, if given,
#                $DERIVE_PIP_INDEX; into /usr/local, for every user
#   files        $DERIVE_FILES copied onto the root, owned by root, by tar
#                inside the chroot (symbolic links resolve in the image)
#   manifest     collect.py in the image: /etc/cellvm-manifest.json anew
#   mkfs         mkfs.ext4 -d of the tree, e2fsck, read-only
#
# Every step prints "step NAME" first; a failure prints "failed: NAME" and
# exits non-zero, and the Go side removes $DERIVE_WORK. Chrooted commands
# run in a private mount namespace that dies with them, so an interrupted
# build leaves nothing mounted.
#
# Environment (all set by package derive):
#   DERIVE_BASE DERIVE_WORK DERIVE_OUT DERIVE_KEY DERIVE_NAME DERIVE_COLLECT
#   DERIVE_MODULES and, optional: DERIVE_APT (space-separated)
#   DERIVE_MIRROR DERIVE_WHEELS DERIVE_REQUIREMENTS DERIVE_PIP_INDEX
#   DERIVE_FILES
set -euo pipefail

current=start
t0=$(date +%s)
step() {
	current=$1
	printf 'step %s (+%ds)\n' "$1" "$(($(date +%s) - t0))"
}
trap 'rc=$?; if ((rc != 0)); then printf "failed: %s\n" "$current"; fi' EXIT

root=$DERIVE_WORK/root
mnt=$DERIVE_WORK/base
mkdir -p "$root" "$mnt"

# in_root CMD... runs CMD chrooted into the tree, with /proc, /dev/null and
# friends, and the host's resolv.conf (apt and pip may need names).
in_root() {
	unshare -m --propagation private sh -c '
		root=$1; shift
		mount -t proc proc "$root/proc" &&
		mount -t tmpfs -o mode=755 tmpfs "$root/dev" &&
		for d in null zero full random urandom tty; do
			touch "$root/dev/$d" && mount --bind "/dev/$d" "$root/dev/$d" || exit 1
		done &&
		touch "$root/etc/resolv.conf" && mount --bind /etc/resolv.conf "$root/etc/resolv.conf" &&
		for pair in "cellvm-wheels:${DERIVE_WHEELS:-}" "cellvm-files:${DERIVE_FILES:-}"; do
			dir=${pair#*:}
			[ -n "$dir" ] || continue
			mkdir -p "$root/tmp/${pair%%:*}" && mount --bind -o ro "$dir" "$root/tmp/${pair%%:*}" || exit 1
		done &&
		exec env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
			DEBIAN_FRONTEND=noninteractive PIP_CONFIG_FILE=/dev/null chroot "$root" "$@"
	' in_root "$root" "$@"
}

step extract
unshare -m --propagation private sh -c '
	mount -o loop,ro "$1" "$2" || { echo "mounting the base image $1 read-only (loop) failed: this needs root and loop devices" >&2; exit 1; }
	cp -a "$2/." "$3/"
' extract "$DERIVE_BASE" "$mnt" "$root"
rmdir "$mnt"
echo "base: $(du -sxm "$root" | cut -f1) MiB"

if [[ -n ${DERIVE_APT:-} ]]; then
	step apt
	if [[ -n ${DERIVE_MIRROR:-} ]]; then
		suite=$(. "$root/etc/os-release" && echo "$VERSION_CODENAME")
		printf 'deb %s %s main\n' "$DERIVE_MIRROR" "$suite" >"$root/etc/apt/sources.list"
		rm -f "$root"/etc/apt/sources.list.d/*
		echo "mirror: $DERIVE_MIRROR $suite"
	fi
	printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
	chmod 755 "$root/usr/sbin/policy-rc.d"
	# shellcheck disable=SC2086 # a list of checked package names
	in_root apt-get -q -o Dpkg::Use-Pty=0 update
	# shellcheck disable=SC2086
	in_root apt-get -q -y -o Dpkg::Use-Pty=0 -o Dpkg::Progress-Fancy=0 -o APT::Install-Recommends=0 install $DERIVE_APT
	rm -f "$root/usr/sbin/policy-rc.d"
	rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
		"$root"/var/log/apt "$root"/var/log/dpkg.log "$root"/var/cache/debconf/*-old "$root"/var/lib/dpkg/*-old
fi

if [[ -n ${DERIVE_WHEELS:-} || -n ${DERIVE_REQUIREMENTS:-} ]]; then
	step pip
	args=(python3 -m pip install --break-system-packages --root-user-action=ignore --no-cache-dir
		--disable-pip-version-check --no-warn-script-location --only-binary=:all: --progress-bar=off)
	if [[ -n ${DERIVE_PIP_INDEX:-} ]]; then args+=(--index-url "$DERIVE_PIP_INDEX"); else args+=(--no-index); fi
	if [[ -n ${DERIVE_WHEELS:-} ]]; then
		args+=(--find-links /tmp/cellvm-wheels)
		shopt -s nullglob
		for w in "$DERIVE_WHEELS"/*.whl; do args+=("/tmp/cellvm-wheels/${w##*/}"); done
		shopt -u nullglob
	fi
	if [[ -n ${DERIVE_REQUIREMENTS:-} ]]; then
		cp "$DERIVE_REQUIREMENTS" "$root/tmp/cellvm-requirements.txt"
		args+=(-r /tmp/cellvm-requirements.txt)
	fi
	in_root "${args[@]}"
	in_root sh -c 'for d in /usr/local/lib/python3*/dist-packages; do [ -d "$d" ] && python3 -m compileall -q "$d" >/dev/null; done; exit 0'
	rm -rf "$root/tmp/cellvm-requirements.txt"
	rmdir "$root/tmp/cellvm-wheels" 2>/dev/null || true
fi

if [[ -n ${DERIVE_FILES:-} ]]; then
	step files
	# Copied by tar inside the chroot: a directory of the tree goes through
	# the image's symbolic link of that name (DIR/bin/x lands in /usr/bin
	# of a merged-/usr image), and links resolve in the image, never on
	# this host. Files replace what is there (a link is replaced, not
	# followed); the image's directories keep their owners and modes.
	in_root sh -c 'tar -C /tmp/cellvm-files -cf - . | tar -C / -xf - --keep-directory-symlink --no-same-owner --no-overwrite-dir'
	rmdir "$root/tmp/cellvm-files"
	echo "files: $(find "$DERIVE_FILES" -mindepth 1 | wc -l) entries"
fi

step manifest
mkdir -p "$root/tmp/cellvm-manifest"
cp "$DERIVE_COLLECT" "$root/tmp/cellvm-manifest/collect.py"
cp "$DERIVE_MODULES" "$root/tmp/cellvm-manifest/modules.txt"
in_root env MPLCONFIGDIR=/var/cache/matplotlib MPLBACKEND=Agg python3 -B /tmp/cellvm-manifest/collect.py \
	/tmp/cellvm-manifest/modules.txt /etc/cellvm-manifest.json
rm -rf "$root/tmp/cellvm-manifest"
base_marker=$(sed -n 's/^key //p' "$root/etc/cellvm-image" 2>/dev/null || true)
rm -f "$root/etc/cellvm-image"
printf 'key %s\nname %s\nbase %s\nbuilt %s\n' "$DERIVE_KEY" "$DERIVE_NAME" "${base_marker:-unknown}" \
	"$(date -u '+%Y-%m-%dT%H:%M:%SZ')" >"$root/etc/cellvm-image"
: >"$root/etc/resolv.conf" # the guest init writes it
rm -rf "${root:?}"/tmp/* "${root:?}"/var/tmp/*

step mkfs
content_kib=$(du -sxk "$root" | cut -f1)
inodes=$(find "$root" -xdev | wc -l)
# As image/build.sh: content, 15% headroom, room for inode tables.
size_kib=$((content_kib * 115 / 100 + inodes * 256 / 1024 + 32768))
size_kib=$(((size_kib + 1023) / 1024 * 1024))
uuid=$(printf '%s' "$DERIVE_KEY" | sed -E 's/^(.{8})(.{4})(.{4})(.{4})(.{12}).*/\1-\2-\3-\4-\5/')
mkdir -p "$(dirname "$DERIVE_OUT")"
mkfs.ext4 -q -F -b 4096 -m 0 -N $((inodes * 11 / 10 + 1024)) -O ^has_journal \
	-L cellvm-root -U "$uuid" -E root_owner=0:0 -d "$root" "$DERIVE_OUT" "${size_kib}K" >/dev/null
e2fsck -fn "$DERIVE_OUT" >/dev/null
chmod 0444 "$DERIVE_OUT"
cp "$root/etc/cellvm-manifest.json" "$(dirname "$DERIVE_OUT")/manifest.json"
echo "image: $((size_kib / 1024)) MiB, $inodes inodes"
step done
