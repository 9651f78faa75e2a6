#!/usr/bin/env bash
# test.sh is make test once scripts/test-deps.sh has run: go test of the
# server module and then of the Go client ($GO_TEST_FLAGS: -race, each
# benchmark once), and beside them, from the start, scripts/test-clients.sh
# (the chart and the Python, TypeScript and Java suites).
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
read -r -a flags <<<"${GO_TEST_FLAGS:--race -count=1 -timeout 30m -bench . -benchtime 1x}"

out="$(mktemp)"
trap 'rm -f "$out"' EXIT
./scripts/test-clients.sh </dev/null >"$out" 2>&1 &
clients=$!

failed=()
echo "== go test ${flags[*]} ./... (the Helm chart and the Python, TypeScript and Java suites run beside it; their output follows)"
go test "${flags[@]}" ./... || failed+=("go test ./...")
# The Go client is a module of its own: ./... at the root does not descend into it.
echo "== go test ${flags[*]} ./... in clients/go"
(cd clients/go && go test "${flags[@]}" ./...) || failed+=("go test ./... in clients/go")

echo "== the Helm chart and the Python, TypeScript and Java clients and examples, side by side"
wait "$clients" || failed+=("scripts/test-clients.sh")
cat "$out"

if ((${#failed[@]} > 0)); then
	printf 'make test: failed: %s\n' "${failed[@]}" >&2
	exit 1
fi
