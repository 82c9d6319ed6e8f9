#!/usr/bin/env bash
# Installs, on Debian 12, every package cellvm needs to build the guest kernel
# and root image, run the nested-KVM test rig, and test the interpreter driver
# on the host's python3.
#
# Idempotent and cheap when nothing is missing: installed packages are checked
# with dpkg-query first, and apt-get (with its `update`) runs only for the
# missing ones. Needs root when something is missing.
set -euo pipefail

packages=(
	# build tools: kernel (kernel/build.sh) and Go
	build-essential bc flex bison libelf-dev libssl-dev cpio xz-utils
	linux-source-6.1 git ca-certificates
	# guest root image (image/build.sh)
	debootstrap e2fsprogs
	# nested-KVM rig (test/nested): QEMU TCG with AMD-V and a Debian kernel
	qemu-system-x86 linux-image-amd64 busybox-static
	# host networking (netpolicy/)
	iptables iproute2
	# host tests of the Python interpreter driver
	python3 python3-numpy python3-pandas python3-matplotlib python3-ipython
	python3-scipy python3-pil
)

# One dpkg-query for all: it prints the installed ones (unknown names go to
# stderr), and anything not "installed" (absent, unpacked, half-configured)
# counts as missing.
declare -A installed=()
while read -r name status; do
	[[ "$status" == installed ]] && installed[$name]=1
done < <(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${packages[@]}" 2>/dev/null || true)
missing=()
for p in "${packages[@]}"; do
	[[ -n "${installed[$p]:-}" ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
	echo "install-deps: all ${#packages[@]} packages present"
	exit 0
fi

echo "install-deps: missing: ${missing[*]}"
if ((EUID != 0)); then
	echo "install-deps: run as root to install them" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-deps: installed ${#missing[@]} packages"
