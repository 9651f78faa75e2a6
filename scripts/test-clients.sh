#!/usr/bin/env bash
# test-clients.sh runs the Python, TypeScript and Java clients' suites
# (clients/*/test.sh) side by side, as make test's last step. Each spends most
# of its time waiting, not computing (leases expiring, claimd and PostgreSQL
# starting, effectspec's killed and paused receivers), so together they take
# about as long as the longest of them instead of the sum.
#
# Each suite writes to a log file of its own; its log is printed whole once it
# ends, in a fixed order (helm, Python, TypeScript, Java), so the output reads as if
# they had run one after another, with each runner's closing lines. Any
# failure fails this script, naming the suite, after every log is printed.
# The chart's test (make helm: helm's packages compiled, then a few claimd
# runs) goes beside them too, first in the output. CLIENT_SUITES="python java"
# runs only those;
# CLIENT_SUITES_SERIAL=1 runs them one after another, as make test did before.
#
# The binaries every suite runs (claimd, and the test tools testpg, testca
# and effectspec) are built here once, before the suites start, and passed
# to them as $CLAIMD_BIN, $CLAIMD_TESTPG_BIN, $CLAIMD_TESTCA_BIN and
# $CLAIMD_EFFECTSPEC_BIN: one go build links each once, where each suite
# linked its own (and, started together on a cold build cache, compiled the
# whole server once per suite). A binary already named by its variable is
# used as it is: make test (scripts/test.sh) builds them before the Go tests
# and these suites start.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=times.sh
source "$repo/scripts/times.sh"
read -r -a suites <<<"${CLIENT_SUITES:-helm python typescript java}"
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT

declare -A title=(
	[python]="Python client and example"
	[typescript]="TypeScript client and Node example"
	[java]="Java client and example"
	[helm]="the Helm chart"
)
# cmd runs suite $1: a client's test.sh, or the chart's Go test (make helm).
cmd() {
	case "$1" in
	helm) "${MAKE:-make}" --no-print-directory -C "$repo" helm ;;
	*) "$repo/clients/$1/test.sh" ;;
	esac
}

for s in "${suites[@]}"; do
	[[ -n "${title[$s]:-}" ]] || {
		echo "test-clients: unknown suite $s (python, typescript, java, helm)" >&2
		exit 2
	}
done

# The shared binaries, in one go build (scripts/testbin.sh), unless named.
# shellcheck source=testbin.sh
source "$repo/scripts/testbin.sh"
testbins "$logs/bin"

declare -A pid
for s in "${suites[@]}"; do
	# SECONDS per suite, and the CPU its processes used (times: user and
	# system of the subshell's children): each prints both beside its result.
	(
		start=$SECONDS
		rc=0
		cmd "$s" || rc=$?
		# times runs in this subshell (not in $(...), a fork of its own).
		times >"$logs/$s.times"
		echo "$((SECONDS - start)) s, $(cpu_seconds <"$logs/$s.times") s of CPU" >"$logs/$s.seconds"
		echo "$rc" >"$logs/$s.rc"
	) </dev/null >"$logs/$s.log" 2>&1 &
	pid[$s]=$!
	if [[ -n "${CLIENT_SUITES_SERIAL:-}" ]]; then
		wait "${pid[$s]}" || true
	fi
done
[[ -n "${CLIENT_SUITES_SERIAL:-}" ]] || echo "test-clients: ${suites[*]} started side by side; each log follows when it ends"

failed=()
for s in "${suites[@]}"; do
	wait "${pid[$s]}" 2>/dev/null || true
	# A suite that left no exit status (killed) has failed.
	rc="$(cat "$logs/$s.rc" 2>/dev/null || echo killed)"
	echo "== ${title[$s]}"
	cat "$logs/$s.log"
	if [[ $rc == 0 ]]; then
		echo "== ${title[$s]}: ok ($(cat "$logs/$s.seconds" 2>/dev/null || echo "?"))"
	else
		echo "== ${title[$s]}: FAILED (exit $rc)"
		failed+=("$s")
	fi
done
if ((${#failed[@]} > 0)); then
	echo "test-clients: failed: ${failed[*]}" >&2
	exit 1
fi
