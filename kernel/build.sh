#!/usr/bin/env bash
# Builds the cellvm guest kernel from Debian's linux-source-6.1 package.
#
# Outputs (relative to the repository root):
#   build/kernel/vmlinux   ELF image, loaded directly by the VMM
#   build/kernel/bzImage   for QEMU and other boot-protocol loaders
#   build/kernel/config    the resolved .config
#
# The config is `make tinyconfig` + kernel/cellvm.config, resolved with
# `make olddefconfig`; every `=y` line of the fragment must survive or the
# build fails, naming the lines that were dropped.
#
# Results are cached under ${CELLVM_CACHE:-$HOME/.cache/cellvm}/kernel/<key>/,
# key = sha256(fragment, this script, linux-source package version), so a
# second run is a copy. Sources are unpacked and objects built under the cache
# too, never in the checkout.
#
# Environment:
#   CELLVM_CACHE         cache root (default $HOME/.cache/cellvm)
#   CELLVM_KERNEL_JOBS   make -j (default 2)
#   CELLVM_KERNEL_VERBOSE=1  show every make line instead of a progress line
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fragment="$repo/kernel/cellvm.config"
out="$repo/build/kernel"
cache_root="${CELLVM_CACHE:-$HOME/.cache/cellvm}/kernel"
jobs="${CELLVM_KERNEL_JOBS:-2}"
src_pkg=linux-source-6.1
src_tar=/usr/src/linux-source-6.1.tar.xz

log() { printf '[kernel %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

pkg_version=$(dpkg-query -W -f='${Version}' "$src_pkg" 2>/dev/null) ||
	die "$src_pkg is not installed (run scripts/install-deps.sh)"
[[ -n "$pkg_version" && -r "$src_tar" ]] ||
	die "$src_tar missing (run scripts/install-deps.sh)"

key=$( {
	printf 'fragment\n'; cat "$fragment"
	printf 'script\n'; cat "${BASH_SOURCE[0]}"
	printf 'source %s %s\n' "$src_pkg" "$pkg_version"
} | sha256sum | cut -d' ' -f1)
result="$cache_root/$key"

install_result() {
	mkdir -p "$out"
	for f in vmlinux bzImage config; do
		cp -f "$result/$f" "$out/$f.tmp"
		mv -f "$out/$f.tmp" "$out/$f"
	done
	log "build/kernel: $(du -h --apparent-size "$out/vmlinux" | cut -f1) vmlinux, $(du -h --apparent-size "$out/bzImage" | cut -f1) bzImage (key ${key:0:12}, $src_pkg $pkg_version)"
}

if [[ -f "$result/done" ]]; then
	log "cache hit: $result"
	install_result
	exit 0
fi

mkdir -p "$cache_root"
# One build at a time per cache: the work tree below is shared.
exec 9>"$cache_root/.lock"
flock 9
if [[ -f "$result/done" ]]; then
	log "cache hit after waiting for another build: $result"
	install_result
	exit 0
fi

start=$(date +%s)
log "cache miss (key ${key:0:12}); building $src_pkg $pkg_version with -j$jobs"
log "started $(date '+%Y-%m-%d %H:%M:%S')"

# Unpack the source once per package version; builds are out of tree (O=).
src="$cache_root/src/$pkg_version"
if [[ ! -f "$src/Makefile" ]]; then
	log "unpacking $src_tar"
	rm -rf "$src.tmp"
	mkdir -p "$src.tmp"
	tar -xJf "$src_tar" -C "$src.tmp" --strip-components=1
	rm -rf "$src"
	mv "$src.tmp" "$src"
fi

# One object tree reused across keys: kbuild rebuilds what a config change
# touches, so editing the fragment does not cost a full build.
work="$cache_root/work"
mkdir -p "$work"
kmake() { make -C "$src" O="$work" ARCH=x86_64 "$@"; }

log "configuring: tinyconfig + kernel/cellvm.config"
# Choice overrides ("changes choice state") are expected here; the logs are
# shown only when a step fails.
kmake -s tinyconfig >"$work/config.log" 2>&1 ||
	{ cat "$work/config.log" >&2; die "make tinyconfig failed"; }
"$src/scripts/kconfig/merge_config.sh" -m -O "$work" "$work/.config" "$fragment" >"$work/merge.log" 2>&1 ||
	{ cat "$work/merge.log" >&2; die "merge_config.sh failed"; }
kmake -s olddefconfig >>"$work/config.log" 2>&1 ||
	{ cat "$work/config.log" >&2; die "make olddefconfig failed"; }

dropped=()
while IFS= read -r line; do
	grep -qxF "$line" "$work/.config" || dropped+=("$line")
done < <(grep -E '^CONFIG_[A-Za-z0-9_]+=y$' "$fragment")
while IFS= read -r line; do
	sym=${line#\# }; sym=${sym%% is not set}
	grep -qE "^$sym=" "$work/.config" && dropped+=("$line (is set)")
done < <(grep -E '^# CONFIG_[A-Za-z0-9_]+ is not set$' "$fragment")
if ((${#dropped[@]})); then
	log "these fragment lines did not survive olddefconfig (unmet dependencies?):"
	printf '    %s\n' "${dropped[@]}" >&2
	die "kernel config check failed; fix kernel/cellvm.config"
fi
log "config check: all $(grep -cE '^CONFIG_[A-Za-z0-9_]+=y$' "$fragment") =y lines of the fragment survived"

log "compiling bzImage vmlinux (full log: $work/build.log)"
set +e
kmake -j"$jobs" bzImage vmlinux 2>&1 | tee "$work/build.log" | {
	if [[ "${CELLVM_KERNEL_VERBOSE:-0}" == 1 ]]; then
		cat >&2
	else
		n=0
		while IFS= read -r l; do
			case "$l" in
			*error:* | *Error\ [0-9]* | *"*** "*) printf '%s\n' "$l" >&2 ;;
			esac
			n=$((n + 1))
			if ((n % 100 == 0)); then
				log "progress: $n make lines, $(($(date +%s) - start))s, last: ${l:0:90}"
			fi
		done
	fi
}
rc=${PIPESTATUS[0]}
set -e
if ((rc != 0)); then
	tail -n 40 "$work/build.log" >&2
	die "make failed (rc $rc); full log: $work/build.log"
fi

elapsed=$(($(date +%s) - start))
rm -rf "$result.tmp"
mkdir -p "$result.tmp"
cp "$work/vmlinux" "$work/arch/x86/boot/bzImage" "$result.tmp/"
cp "$work/.config" "$result.tmp/config"
cp "$work/build.log" "$result.tmp/build.log"
printf 'source %s %s\nbuild_seconds %s\njobs %s\nfinished %s\n' \
	"$src_pkg" "$pkg_version" "$elapsed" "$jobs" "$(date '+%Y-%m-%d %H:%M:%S')" >"$result.tmp/done"
rm -rf "$result"
mv "$result.tmp" "$result"

log "finished $(date '+%Y-%m-%d %H:%M:%S'); build time ${elapsed}s"
install_result
