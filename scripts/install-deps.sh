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
	# guest root image (image/build.sh), TypeScript's pinned package
	# (image/typescript.sh: fetched with curl where npm is absent, checked
	# with openssl)
	debootstrap e2fsprogs curl openssl
	# nested-KVM rig (test/nested): QEMU TCG with AMD-V and a Debian kernel
	# (QEMU itself comes from bookworm-backports, below)
	linux-image-amd64 busybox-static
	# host networking (netpolicy/)
	iptables iproute2
	# host tests of the Python interpreter driver
	python3 python3-numpy python3-pandas python3-matplotlib python3-ipython
	python3-scipy python3-pil
	# host tests of the Node.js driver (the guest's Node is bookworm's too)
	nodejs
	# the router test (cmd/cellvm/router_test.go) runs deploy/router/nginx.conf
	nginx
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

# The rig's QEMU is 10.0 from bookworm-backports, not bookworm's 7.2: in the
# same loaded rig, repeated L2 boots failed 3 in 16 under 7.2 (a guest left
# holding L1's own registers by the emulated AMD-V, then hung or
# triple-faulted) and 1 in 24 under 10.0 (test/nested/README.md).
backports=/etc/apt/sources.list.d/cellvm-bookworm-backports.list
qemu_ok() {
	local v
	v=$(dpkg-query -W -f='${db:Status-Status} ${Version}' qemu-system-x86 2>/dev/null) || return 1
	[[ $v == installed\ * ]] && dpkg --compare-versions "${v#installed }" ge 1:10.0
}
need_qemu=0
qemu_ok || need_qemu=1

if ((${#missing[@]} == 0 && need_qemu == 0)); then
	echo "install-deps: all ${#packages[@]} packages present, and QEMU >= 10.0"
	exit 0
fi

((${#missing[@]})) && echo "install-deps: missing: ${missing[*]}"
((need_qemu)) && echo "install-deps: missing: qemu-system-x86 >= 10.0 (from bookworm-backports)"
if ((EUID != 0)); then
	echo "install-deps: run as root to install them" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
if ((need_qemu)) && ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
	echo "deb http://deb.debian.org/debian bookworm-backports main" >"$backports"
	echo "install-deps: added $backports"
fi
apt-get update -q
if ((${#missing[@]})); then
	apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# The router test runs nginx itself; a fresh install's own service (the
# default site on port 80) is not wanted, so it is stopped and disabled.
if [[ " ${missing[*]} " == *" nginx "* ]] && command -v systemctl >/dev/null && systemctl is-enabled --quiet nginx 2>/dev/null; then
	systemctl disable --now nginx || true
fi
if ((need_qemu)); then
	apt-get install -y -q --no-install-recommends -t bookworm-backports qemu-system-x86
	qemu_ok || { echo "install-deps: qemu-system-x86 from bookworm-backports did not install" >&2; exit 1; }
fi
echo "install-deps: done ($(qemu-system-x86_64 --version | head -1))"
