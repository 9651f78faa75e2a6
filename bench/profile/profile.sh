#!/usr/bin/env bash
# profile.sh: where claimd's CPU goes in one benchmark scenario, by
# component (claimd's code, gRPC, go-redis, pgx, protobuf, metrics, crypto,
# the Go runtime's GC, scheduler, sysmon and stack growth).
#
#   bench/profile/profile.sh [SCENARIO] [TARGET]
#
# SCENARIO is one of scripts/bench.sh's (default new), TARGET claimd (Redis +
# PostgreSQL, the default) or claimd-embedded. It runs scripts/bench.sh for
# that scenario alone (BENCH_DURATION, default 20s), records claimd with
# `perf record -g` for PROFILE_SECONDS (default 10) in the middle of the load
# run, and prints a table of each component's share of the samples and of
# claimd's CPU µs per operation measured by the same run. Needs perf
# (Debian: linux-perf) and the rights to profile another process (root, or
# kernel.perf_event_paranoid <= 1). Its figures are in bench/NOTES.md.
set -euo pipefail

cd "$(dirname "$0")/../.."
scenario=${1:-new}
target=${2:-claimd}
seconds=${PROFILE_SECONDS:-10}
command -v perf >/dev/null || { echo "profile.sh: perf not found (Debian: apt-get install linux-perf)" >&2; exit 1; }

work=$(mktemp -d /tmp/claimd-profile.XXXXXX)
bench_pid=
cleanup() {
	if [[ -n $bench_pid ]] && kill -0 "$bench_pid" 2>/dev/null; then
		kill "$bench_pid" 2>/dev/null || true # benchrun stops what it started on SIGTERM
		wait "$bench_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

BENCH_DURATION=${BENCH_DURATION:-20s} BENCH_TARGETS=$target BENCH_CLIENTS=claimload BENCH_SCENARIOS=$scenario \
	BENCH_BASELINES=false BENCH_REPLICAS='' BENCH_PYTHON=false \
	BENCH_OUT="$work/report.md" BENCH_JSON="$work/results.json" BENCH_SVG="$work/results.svg" \
	scripts/bench.sh >"$work/bench.log" 2>&1 &
bench_pid=$!

# The load client runs only while the scenario is measured; claimd is the
# `claimd serve` that benchrun started in this run's own directory.
server=
for _ in $(seq 1 600); do
	if pgrep -f "claimload .*-scenario $scenario( |$)" >/dev/null; then
		server=$(pgrep -f "claimd-bench\.[^/]*/bin/claimd serve" | head -1)
		break
	fi
	kill -0 "$bench_pid" 2>/dev/null || { cat "$work/bench.log" >&2; exit 1; }
	sleep 0.5
done
[[ -n $server ]] || { echo "profile.sh: the $scenario load run did not start" >&2; exit 1; }
sleep 2 # past the connection's warm-up
perf record -q -F 999 -g -p "$server" -o "$work/perf.data" -- sleep "$seconds" >/dev/null 2>&1
wait "$bench_pid"
bench_pid=

per_op=$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
print(r["cpu_seconds"]["server"] / r["requests"] * 1e6)' "$work/results.json")
echo "claimd ($target), $scenario: $(printf '%.1f' "$per_op") µs of CPU per operation; $seconds s of samples"
echo
perf script -i "$work/perf.data" 2>/dev/null | python3 bench/profile/components.py --per-op "$per_op"
