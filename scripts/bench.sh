#!/usr/bin/env bash
# bench.sh: claimd's benchmarks and their baselines, in one run on this
# machine, written to BENCHMARKS.md (with bench/results.svg and
# bench/results.json). `make bench` runs it after `make tools` has installed
# the pinned ghz.
#
#   BENCH_DURATION  duration of each load run (default 15s; 2s for a smoke run)
#   BENCH_CALLERS   concurrent callers (default 50)
#   BENCH_TARGETS   subset of noop,naive,claimd-embedded,claimd-embedded-relaxed,claimd,claimd-heap128
#                   (claimd-embedded-relaxed runs the new scenario only)
#   BENCH_CLIENTS   subset of claimload,ghz (ghz is installed only when used)
#   BENCH_SCENARIOS subset of lifecycle,lifecycle-start,new,dup,mix,contend
#                   (the lifecycle ones run under claimload only). With
#                   lifecycle-start, the naive handler and both claimd tier
#                   modes also run it from 8 callers, counting Redis commands
#                   and PostgreSQL writes; with lifecycle and the naive
#                   handler, both tier modes run it once more in an open loop
#                   at half the naive handler's rate (claimload -rate)
#   BENCH_REPLICAS  claimd replica counts of the scaling runs (default 1,2,4;
#                   empty for none)
#   BENCH_PYTHON    false to skip the Python baseline (claimd's Python guard
#                   against Powertools' idempotency on Redis, in its own
#                   virtualenv bench/python/.venv, made here from
#                   bench/python/requirements.txt)
#   BENCH_PY_THREADS threads of the Python baseline (default 8)
#   BENCH_GROWTH    stored claims of the growth runs (default
#                   100000,1000000,10000000: about 15 GB of PostgreSQL under
#                   $TMPDIR and some minutes to load; empty for none): new keys
#                   on claimd (Redis + PostgreSQL) at each size, Redis holding
#                   a million settled records from that size on, then last
#                   month's audit partition dropped by claimd prune under load
#   BENCH_CORES     GOMAXPROCS of claimd, the handlers and the load clients
#                   (default: every core), to rerun on bigger hardware
#   BENCH_BASELINES false to skip redis-benchmark and pgbench
#   BENCH_PROFILE   false to skip the profiles: with perf installed (Debian:
#                   linux-perf) and allowed to record another process, claimd
#                   (Redis + PostgreSQL) runs the dup, new and lifecycle-start
#                   scenarios (those selected) once more each under
#                   `perf record -g`, and the report says where its CPU went,
#                   by component; without perf the report says nothing of it
#   BENCH_OUT       report path (default BENCHMARKS.md)
#   BENCH_JSON, BENCH_SVG  raw results and plot (default bench/results.json
#                   and bench/results.svg): a partial run need not replace
#                   the full run's
#
# scripts/bench.sh --render rewrites BENCHMARKS.md and the plot from
# bench/results.json without measuring (after editing bench/NOTES.md).
#
# Redis and PostgreSQL are started (and stopped) by the harness with the
# project's test tooling (internal/testenv), PostgreSQL with its durable
# defaults; the redis-server, postgresql and their benchmark tools come from
# scripts/test-deps.sh. Every process the run starts is stopped by PID when
# it ends, on error and on Ctrl-C too.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)

GHZ_VERSION=${GHZ_VERSION:-v0.120.0}
TOOLS_BIN=${TOOLS_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/claimd-tools/bin}
export PATH="$TOOLS_BIN:$PATH"

if [[ ${1:-} == --render ]]; then
	exec go run ./bench/cmd/benchrun -render "${BENCH_JSON:-$root/bench/results.json}" \
		-out "${BENCH_OUT:-$root/BENCHMARKS.md}" -svg "${BENCH_SVG:-$root/bench/results.svg}" -notes "$root/bench/NOTES.md"
fi

clients=${BENCH_CLIENTS:-claimload,ghz}

./scripts/test-deps.sh
for tool in redis-benchmark pgbench; do
	command -v "$tool" >/dev/null || { echo "bench.sh: $tool not found (packages redis-tools, postgresql-client)" >&2; exit 1; }
done
# go install leaves ghz --version at "dev": the module version is in the binary.
if [[ ,$clients, == *,ghz,* ]] && ! { command -v ghz >/dev/null && go version -m "$(command -v ghz)" | grep -q "github.com/bojand/ghz[[:space:]]*$GHZ_VERSION"; }; then
	echo "bench.sh: installing ghz $GHZ_VERSION into $TOOLS_BIN"
	mkdir -p "$TOOLS_BIN"
	(cd /tmp && GOBIN="$TOOLS_BIN" GOFLAGS='' go install "github.com/bojand/ghz/cmd/ghz@$GHZ_VERSION")
fi

python_args=()
if [[ ${BENCH_PYTHON:-true} != false ]]; then
	venv=$root/bench/python/.venv
	want="$(sha256sum <bench/python/requirements.txt | cut -d' ' -f1) $(python3 -c 'import sys; print(sys.version)' | head -1)"
	if [[ ! -x $venv/bin/python || ! -f $venv/.stamp || "$(cat "$venv/.stamp")" != "$want" ]]; then
		echo "bench.sh: installing the Python baseline into $venv"
		rm -rf "$venv"
		python3 -m venv "$venv"
		"$venv/bin/pip" install --quiet --disable-pip-version-check -r bench/python/requirements.txt
		echo "$want" >"$venv/.stamp"
	fi
	python_args=(-python "$venv/bin/python" -py-script "$root/bench/python/guard_vs_powertools.py"
		-py-src "$root/clients/python/src" -py-threads "${BENCH_PY_THREADS:-8}")
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/claimd-bench.XXXXXX")
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT

echo "bench.sh: building into $work/bin"
go build -o "$work/bin/" ./cmd/claimd ./cmd/claimload ./bench/cmd/noop ./bench/cmd/naive ./bench/cmd/benchrun

perf=
if [[ ${BENCH_PROFILE:-true} != false ]]; then
	if command -v perf >/dev/null && perf record -q -o /dev/null -- true >/dev/null 2>&1; then
		perf=$(command -v perf)
	else
		echo "bench.sh: perf is missing or may not record here: no profiles (Debian: apt-get install linux-perf; kernel.perf_event_paranoid <= 1)" >&2
	fi
fi

duration=${BENCH_DURATION:-15s}
# The report quotes the command that reproduces it: make sets MAKELEVEL.
command=scripts/bench.sh
[[ -n ${MAKELEVEL:-} ]] && command="make bench"
for v in BENCH_OUT BENCH_JSON BENCH_SVG BENCH_PROFILE BENCH_PYTHON BENCH_PY_THREADS BENCH_BASELINES BENCH_SCENARIOS BENCH_CLIENTS BENCH_TARGETS BENCH_CALLERS BENCH_CORES BENCH_REPLICAS BENCH_GROWTH BENCH_DURATION; do
	[[ -n ${!v+x} ]] && command="$v=${!v} $command"
done

"$work/bin/benchrun" \
	-bin "$work/bin" \
	-ghz "$(command -v ghz || echo ghz)" \
	-work "$work" \
	-duration "$duration" \
	-c "${BENCH_CALLERS:-50}" \
	-targets "${BENCH_TARGETS:-noop,naive,claimd-embedded,claimd-embedded-relaxed,claimd,claimd-heap128}" \
	-clients "$clients" \
	-scenarios "${BENCH_SCENARIOS:-lifecycle,lifecycle-start,new,dup,mix,contend}" \
	-replicas "${BENCH_REPLICAS-1,2,4}" \
	-growth "${BENCH_GROWTH-100000,1000000,10000000}" \
	-cores "${BENCH_CORES:-0}" \
	-baselines="${BENCH_BASELINES:-true}" \
	"${python_args[@]}" \
	-out "${BENCH_OUT:-$root/BENCHMARKS.md}" \
	-svg "${BENCH_SVG:-$root/bench/results.svg}" \
	-json "${BENCH_JSON:-$root/bench/results.json}" \
	-notes "$root/bench/NOTES.md" \
	-perf "$perf" \
	-command "$command"
