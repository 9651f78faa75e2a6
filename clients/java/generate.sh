#!/usr/bin/env bash
# Generates src/generated/java (protobuf-java messages) from the repository's
# proto/ with buf and protoc's built-in Java generator, protoc pinned below and
# fetched once from Maven Central into the tools cache (outside the checkout).
#
#   ./generate.sh          rewrite src/generated/java
#   ./generate.sh --check  fail if the committed src/generated/java differs,
#                          byte for byte, from a fresh generation
#
# The gRPC method descriptors are not generated: protoc-gen-grpc-java's native
# binary is not served to this project's machines (its linux-x86_64 exe of
# 1.85.1, the pom's grpc.version, and of 1.85.0 were both missing from Maven
# Central as this project's machines reach it, tried 2026-12-03), so
# src/main/java/dev/claimd/client/ClaimdMethods.java declares them by hand and
# ClaimdMethodsTest checks them against the generated service descriptors.
set -euo pipefail

# PROTOC_VERSION must not be newer than the protobuf-java in pom.xml.
PROTOC_VERSION=4.36.2

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=mvn.sh
source "$here/mvn.sh"

check=false
case "${1:-}" in
"") ;;
--check) check=true ;;
*)
	echo "usage: $0 [--check]" >&2
	exit 2
	;;
esac

buf="$tools_dir/bin/buf"
if [[ ! -x "$buf" ]]; then
	make -C "$repo" --no-print-directory buf >/dev/null
fi

protoc_dir="$tools_dir/protoc-$PROTOC_VERSION/bin"
if [[ ! -x "$protoc_dir/protoc" ]]; then
	mkdir -p "$protoc_dir" "$maven_repo"
	echo "fetching protoc $PROTOC_VERSION into $protoc_dir"
	(cd "$protoc_dir" && mvn "${maven_flags[@]}" \
		org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
		-Dartifact="com.google.protobuf:protoc:$PROTOC_VERSION:exe:linux-x86_64" \
		-DoutputDirectory="$protoc_dir" -Dmdep.stripVersion=true -Dmdep.stripClassifier=true 2>&1) | strip_resets
	mv "$protoc_dir/protoc.exe" "$protoc_dir/protoc"
	chmod +x "$protoc_dir/protoc"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$here" && PATH="$protoc_dir:$PATH" "$buf" generate -o "$work")

committed="$here/src/generated/java"
if $check; then
	if ! diff -r "$committed" "$work/src/generated/java" >&2; then
		echo "src/generated/java is stale: run clients/java/generate.sh and commit the result" >&2
		exit 1
	fi
	echo "src/generated/java matches a fresh generation"
	exit 0
fi
rm -rf "$committed"
mkdir -p "$(dirname "$committed")"
cp -R "$work/src/generated/java" "$committed"
echo "wrote $committed"
