#!/usr/bin/env bash
# Generates src/gen (protobuf-es messages and service descriptors) from the
# repository's proto/ with the buf and protoc-gen-es pinned in
# package-lock.json (local plugins, no remote ones), as buf.gen.yaml says.
#
#   ./generate.sh          rewrite src/gen
#   ./generate.sh --check  fail if the committed src/gen differs from a fresh
#                          generation
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=npm.sh
source "$here/npm.sh"

check=false
case "${1:-}" in
"") ;;
--check) check=true ;;
*)
	echo "usage: $0 [--check]" >&2
	exit 2
	;;
esac

npm_install "$here"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$here" && ./node_modules/.bin/buf generate -o "$work")

if $check; then
	if ! diff -r "$here/src/gen" "$work/src/gen" >&2; then
		echo "src/gen is stale: run clients/typescript/generate.sh and commit the result" >&2
		exit 1
	fi
	echo "src/gen matches a fresh generation"
	exit 0
fi
rm -rf "$here/src/gen"
cp -R "$work/src/gen" "$here/src/gen"
echo "wrote $here/src/gen"
