#!/bin/bash
# mkinitramfs.sh KVER OUT.cpio: builds the base initramfs of the nested rig.
#
# Why: L1 runs Debian's stock kernel, which has KVM, virtio, 9p and overlayfs
# as modules. The initramfs carries a static busybox, exactly the modules the
# rig needs (with their dependencies, in load order, uncompressed so busybox
# insmod can load them) and init.sh as /init. The per-run command is not in
# here: run.sh appends a second small cpio archive for it, so this one can be
# cached (run.sh keys the cache on init.sh, this script, busybox and KVER).
set -euo pipefail

kver=${1:?usage: mkinitramfs.sh KVER OUT.cpio}
out=${2:?usage: mkinitramfs.sh KVER OUT.cpio}
here=$(cd "$(dirname "$0")" && pwd)
moddir=/lib/modules/$kver

# Modules the rig wants, in the order NESTED-KVM.md measured; dependencies
# reported by modinfo are inserted before their users.
wanted=(irqbypass kvm ccp kvm-amd
	virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci
	netfs fscache 9pnet 9pnet_virtio 9p overlay
	virtio_console)

declare -A path_of=() done_=() builtin_=()
while IFS= read -r -d '' f; do
	b=${f##*/}
	b=${b%.ko*}
	path_of[${b//-/_}]=$f
done < <(find "$moddir/kernel" -name '*.ko*' -print0)
if [[ -f $moddir/modules.builtin ]]; then
	while read -r b; do
		b=${b##*/}
		b=${b%.ko*}
		builtin_[${b//-/_}]=1
	done <"$moddir/modules.builtin"
fi

order=()
visit() {
	local n=${1//-/_}
	[[ -n ${done_[$n]:-} || -n ${builtin_[$n]:-} ]] && return 0
	local f=${path_of[$n]:-}
	[[ -n $f ]] || { echo "mkinitramfs: module $1 not found under $moddir" >&2; exit 1; }
	done_[$n]=1
	local deps d
	deps=$(modinfo -F depends "$f")
	for d in ${deps//,/ }; do visit "$d"; done
	order+=("$n")
}
for m in "${wanted[@]}"; do visit "$m"; done

stage=$(mktemp -d "${out}.stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{bin,dev,proc,sys,host,rw,newroot,rig,etc,lib/modules}

cp /bin/busybox "$stage/bin/busybox"
for a in $(/bin/busybox --list); do
	[[ $a == busybox ]] || ln -s busybox "$stage/bin/$a"
done
# The kernel opens /dev/console before /init runs; devtmpfs comes later.
mknod -m 600 "$stage/dev/console" c 5 1 2>/dev/null || true

for n in "${order[@]}"; do
	f=${path_of[$n]}
	case $f in
	*.ko.xz) xz -dc "$f" >"$stage/lib/modules/$n.ko" ;;
	*.ko.zst) zstd -qdc "$f" >"$stage/lib/modules/$n.ko" ;;
	*.ko.gz) gzip -dc "$f" >"$stage/lib/modules/$n.ko" ;;
	*) cp "$f" "$stage/lib/modules/$n.ko" ;;
	esac
	echo "$n" >>"$stage/etc/rig-modules"
done

install -m 0755 "$here/init.sh" "$stage/init"

# Uncompressed: TCG would spend longer inflating it than QEMU spends loading it.
(cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | /bin/busybox cpio -o -H newc -R 0:0 2>/dev/null) >"$out.tmp"
mv "$out.tmp" "$out"
echo "mkinitramfs: $out ($(du -h "$out" | cut -f1)), modules: ${order[*]}" >&2
