#!/usr/bin/env bash
# install-buf.sh VERSION BIN_DIR installs buf VERSION (v1.75.0) as
# BIN_DIR/buf: Buf's own release binary as the npm registry serves it
# (@bufbuild/buf-<os>-<arch>, published by Buf with each release; npm checks
# the tarball against the registry's integrity hash), or, where npm or a
# package for this platform is missing, built from source with go install.
#
# Why not always go install: buf is a large program (its compile was 206 s of
# CPU on a two-core machine, the biggest single item of a fresh make test,
# which needs buf only for the Java client's generated-code check). The npm
# binary is the same release, and buf's output depends only on its version.
set -euo pipefail

version="${1:?usage: install-buf.sh VERSION BIN_DIR}"
bin="${2:?usage: install-buf.sh VERSION BIN_DIR}"
mkdir -p "$bin"

case "$(uname -s)-$(uname -m)" in
Linux-x86_64) pkg=buf-linux-x64 ;;
Linux-aarch64 | Linux-arm64) pkg=buf-linux-aarch64 ;;
Darwin-arm64) pkg=buf-darwin-arm64 ;;
Darwin-x86_64) pkg=buf-darwin-x64 ;;
*) pkg="" ;;
esac

if [[ -n $pkg ]] && command -v npm >/dev/null; then
	tmp="$(mktemp -d)"
	trap 'rm -rf "$tmp"' EXIT
	if npm pack --loglevel=error --pack-destination "$tmp" "@bufbuild/$pkg@${version#v}" >/dev/null 2>"$tmp/npm.err" &&
		tar -xzf "$tmp"/*.tgz -C "$tmp" package/bin/buf &&
		[[ "$("$tmp/package/bin/buf" --version 2>/dev/null)" == "${version#v}" ]]; then
		install -m 0755 "$tmp/package/bin/buf" "$bin/buf"
		echo "install-buf: buf $version from npm's @bufbuild/$pkg"
		exit 0
	fi
	echo "install-buf: npm's @bufbuild/$pkg@${version#v} did not install ($(grep -m1 "npm error" "$tmp/npm.err" || echo "no package")); building buf from source instead" >&2
fi
cd /tmp && GOBIN="$bin" GOFLAGS='' go install "github.com/bufbuild/buf/cmd/buf@$version"
echo "install-buf: buf $version built with go install"
