#!/usr/bin/env bash
# Leaves TypeScript's transpiler, pinned here and nowhere else, in
# build/typescript/package/: package.json, LICENSE.txt and lib/typescript.js
# (self-contained: ts.transpileModule needs nothing else, and the type
# libraries, tsc, tsserver and the translations are ~20 MiB the guest
# never reads). The Node runtime's TypeScript cells strip types with it
# (guestinit/interp: CELLVM_TYPESCRIPT); image/build.sh copies it into the
# image as /opt/cellvm/node_modules/typescript; host tests load it from
# build/typescript.
#
# The package is fetched once (`npm pack`, or curl from the registry where
# npm is absent) into ${CELLVM_CACHE:-$HOME/.cache/cellvm}/typescript/ and
# checked against the pinned integrity (sha512) before it is used, so a
# clean clone gets the same bytes as the build that pinned it.
#
# Usage: image/typescript.sh [--print-version | --print-integrity]
set -euo pipefail

# The pin: the newest 5.x the npm registry serves (2026-12), and the
# sha512 of its tarball (npm view typescript@VERSION dist.integrity).
version=5.9.3
integrity=sha512-jl1vZzPDinLr9eUt3J/t7V6FgNEw9QjvBPdysz9KfQDD41fQrC2Y4vKQdiaUpFT4bXlb1RHhLpp8wtm6M5TgSw==

case "${1:-}" in
--print-version) echo "$version"; exit 0 ;;
--print-integrity) echo "$integrity"; exit 0 ;;
"") ;;
*) echo "usage: $0 [--print-version | --print-integrity]" >&2; exit 2 ;;
esac

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache="${CELLVM_CACHE:-$HOME/.cache/cellvm}/typescript"
tgz="$cache/typescript-$version.tgz"
out="$repo/build/typescript"
files=(package/package.json package/LICENSE.txt package/lib/typescript.js)

log() { printf '[typescript] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# sri FILE prints FILE's sha512 as a subresource-integrity string.
sri() { printf 'sha512-%s' "$(openssl dgst -sha512 -binary "$1" | base64 -w0)"; }

if [[ -f "$out/.version" && "$(cat "$out/.version")" == "$version $integrity" ]]; then
	exit 0
fi
command -v openssl >/dev/null || die "openssl missing (run scripts/install-deps.sh)"

if [[ ! -f "$tgz" ]] || [[ "$(sri "$tgz")" != "$integrity" ]]; then
	mkdir -p "$cache"
	tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	if command -v npm >/dev/null; then
		log "npm pack typescript@$version"
		(cd "$tmp" && npm pack "typescript@$version" --silent >/dev/null) ||
			die "npm pack typescript@$version failed (no network? a registry in ~/.npmrc?)"
	elif command -v curl >/dev/null; then
		log "curl typescript-$version.tgz (npm not found)"
		curl -fsSL --retry 2 -o "$tmp/typescript-$version.tgz" \
			"https://registry.npmjs.org/typescript/-/typescript-$version.tgz" ||
			die "downloading typescript $version failed"
	else
		die "neither npm nor curl is installed: cannot fetch typescript $version"
	fi
	[[ -f "$tmp/typescript-$version.tgz" ]] || die "npm pack left no typescript-$version.tgz"
	got=$(sri "$tmp/typescript-$version.tgz")
	[[ "$got" == "$integrity" ]] || die "typescript-$version.tgz is $got, not the pinned $integrity"
	mv "$tmp/typescript-$version.tgz" "$tgz"
	rm -rf "$tmp"
	trap - EXIT
fi

rm -rf "$out.tmp"
mkdir -p "$out.tmp"
tar -xzf "$tgz" -C "$out.tmp" --no-same-owner "${files[@]}" || die "extracting $tgz failed"
grep -q "\"version\": \"$version\"" "$out.tmp/package/package.json" ||
	die "$tgz's package.json is not version $version"
chmod -R u=rwX,go=rX "$out.tmp"
printf '%s %s\n' "$version" "$integrity" >"$out.tmp/.version"
rm -rf "$out"
mv "$out.tmp" "$out"
log "build/typescript: typescript $version ($(du -sh "$out" | cut -f1))"
