#!/usr/bin/env bash
# test.sh is make test once scripts/test-deps.sh has run: go test of the
# server module ($GO_TEST_FLAGS: -race, each benchmark once) but its doc test,
# and beside it, from the start, scripts/test-clients.sh (the chart, the Go
# client module, the doc test once grpcurl is installed, and the Python,
# TypeScript and Java suites). The server's pass is the longest path of
# make test: everything that need not wait for it runs beside it.
#
# Why together: on two cores the Go passes are compute (the -race build and
# the tests' own work), while the client suites mostly wait (leases expiring,
# servers starting, killed receivers), and what they compute (npm, pip and
# Maven installs, javac, tsc, the shared claimd build) is a different set of
# work; run one after the other, make test took the sum of both.
#
# The Go passes print as they run; test-clients.sh's output goes to a file
# and is printed whole after them, so every suite still reads as if it ran
# alone, in the same order as before. Any failure fails this script, naming
# what failed, after all the output is printed.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
# shellcheck source=times.sh
source scripts/times.sh
read -r -a flags <<<"${GO_TEST_FLAGS:--race -count=1 -timeout 30m -p 4 -bench . -benchtime 1x}"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
./scripts/test-clients.sh </dev/null >"$tmp/clients.log" 2>&1 &
clients=$!

echo "== the Helm chart, the Go client, the doc test and the Python, TypeScript and Java suites run beside the server's Go tests; their output follows them"
# The server module's packages but ./docs, whose test runs in test-clients.sh
# after make grpcurl. The pass says how long it took and the CPU it used (as
# test-clients.sh does for each suite).
failed=()
start=$SECONDS
echo "== go test ${flags[*]} ./... but ./docs"
if (
	all="$(go list ./...)" || exit
	mapfile -t pkgs < <(grep -v '/docs$' <<<"$all")
	go test "${flags[@]}" "${pkgs[@]}" || exit
	# times runs in this subshell: the CPU of its children, go test's.
	times >"$tmp/go.times"
); then
	echo "== go test ./... but ./docs: ok ($((SECONDS - start)) s, $(cpu_seconds <"$tmp/go.times") s of CPU)"
else
	echo "== go test ./... but ./docs: FAILED (exit $?)"
	failed+=("go test ./... but ./docs")
fi

echo "== the Helm chart, the Go client, the doc test and the Python, TypeScript and Java clients and examples, side by side"
wait "$clients" || failed+=("scripts/test-clients.sh")
cat "$tmp/clients.log"

if ((${#failed[@]} > 0)); then
	printf 'make test: failed: %s\n' "${failed[@]}" >&2
	exit 1
fi
