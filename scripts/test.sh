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
# shellcheck source=times.sh
source scripts/times.sh
read -r -a flags <<<"${GO_TEST_FLAGS:--race -count=1 -timeout 30m -p 4 -bench . -benchtime 1x}"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
./scripts/test-clients.sh </dev/null >"$tmp/clients.log" 2>&1 &
clients=$!

# go_pass DIR runs go test in the module at DIR and says how long it took
# and the CPU it used (as test-clients.sh does for each suite).
failed=()
go_pass() {
	local start=$SECONDS rc=0
	echo "== go test ${flags[*]} ./... in $1"
	(
		cd "$1"
		go test "${flags[@]}" ./... || exit
		# times runs in this subshell: the CPU of its children, go test's.
		times >"$tmp/go.times"
	) || rc=$?
	if ((rc == 0)); then
		echo "== go test ./... in $1: ok ($((SECONDS - start)) s, $(cpu_seconds <"$tmp/go.times") s of CPU)"
	else
		echo "== go test ./... in $1: FAILED (exit $rc)"
		failed+=("go test ./... in $1")
	fi
}
echo "== the Helm chart and the Python, TypeScript and Java suites run beside the Go tests; their output follows them"
go_pass .
# The Go client is a module of its own: ./... at the root does not descend into it.
go_pass clients/go

echo "== the Helm chart and the Python, TypeScript and Java clients and examples, side by side"
wait "$clients" || failed+=("scripts/test-clients.sh")
cat "$tmp/clients.log"

if ((${#failed[@]} > 0)); then
	printf 'make test: failed: %s\n' "${failed[@]}" >&2
	exit 1
fi
