#!/usr/bin/env bash
# test.sh is make test once scripts/test-deps.sh has run: go test of the
# server module and of the Go client ($GO_TEST_FLAGS: -race; $GO_TEST_ARGS,
# given to every test binary: each benchmark once), and beside it, from the
# start, scripts/test-clients.sh (the chart and the Python, TypeScript and
# Java suites).
#
# Why together: on two cores the Go pass is compute (the -race build and
# the tests' own work), while the client suites mostly wait (leases expiring,
# servers starting, killed receivers), and what they compute (npm, pip and
# Maven installs, javac, tsc) is a different set of work; run one after the
# other, make test took the sum of both.
#
# The Go pass prints as it runs; test-clients.sh's output goes to a file
# and is printed whole after them, so every suite still reads as if it ran
# alone, in the same order as before. Any failure fails this script, naming
# what failed, after all the output is printed.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
# shellcheck source=times.sh
source scripts/times.sh
read -r -a flags <<<"${GO_TEST_FLAGS:--race -count=1 -timeout 30m -p 4 -vet=off}"
# After -args, so that go test passes them on instead of reading them: its
# own -bench would run the test binaries one at a time (see the Makefile).
read -r -a args <<<"${GO_TEST_ARGS--test.bench=. -test.benchtime=1x}"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The binaries the tests run (claimd and the test tools testpg, testca and
# effectspec), built first, once (scripts/testbin.sh), and named to every
# suite by $CLAIMD_BIN and the others (test-clients.sh and the clients'
# harnesses, deploy's test, clients/go/claimdtest and so docs/doc_test.go):
# no test links them again, and no test's own go build of them runs beside
# this one, compiling the same packages twice on a cold build cache.
# cmd/claimd's tests still build claimd, with a version of their own.
# shellcheck source=testbin.sh
source scripts/testbin.sh
echo "== claimd and the test tools"
testbins "$tmp/bin"

./scripts/test-clients.sh </dev/null >"$tmp/clients.log" 2>&1 &
clients=$!

# The server module and the Go client module (clients/go, which ./... at the
# root does not descend into) are tested by one go test, in a workspace of
# the two and the generated API they share (gen/): their requirements are
# the same versions, so the workspace builds what each module builds alone,
# and one go test compiles each shared package once and runs the client's
# tests in the same pool as the server's. Run one after the other, the
# client's pass was make test's last 77 s on a fresh machine, with both
# cores mostly idle. The workspace file is make test's own (GOWORK, in a
# temporary directory): nothing else sees it.
(cd "$tmp" && go work init "$repo" "$repo/clients/go" "$repo/gen")
pkgs=(./... ./clients/go/...)
failed=()
start=$SECONDS
echo "== the Helm chart and the Python, TypeScript and Java suites run beside the Go tests; their output follows them"
echo "== go test ${flags[*]} ${pkgs[*]} -args ${args[*]}"
if (
	export GOWORK="$tmp/go.work"
	go test "${flags[@]}" "${pkgs[@]}" -args "${args[@]}" || exit
	# times runs in this subshell: the CPU of its children, go test's.
	times >"$tmp/go.times"
); then
	echo "== go test ${pkgs[*]}: ok ($((SECONDS - start)) s, $(cpu_seconds <"$tmp/go.times") s of CPU)"
else
	echo "== go test ${pkgs[*]}: FAILED (exit $?)"
	failed+=("go test ${pkgs[*]}")
fi

echo "== the Helm chart and the Python, TypeScript and Java clients and examples, side by side"
wait "$clients" || failed+=("scripts/test-clients.sh")
cat "$tmp/clients.log"

if ((${#failed[@]} > 0)); then
	printf 'make test: failed: %s\n' "${failed[@]}" >&2
	exit 1
fi
