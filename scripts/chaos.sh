#!/usr/bin/env bash
# chaos.sh: claimd's fault-injection suite (cmd/chaos), written to
# RELIABILITY.md. `make chaos` runs it.
#
#   CHAOS_DURATION   load of each scenario (default 20s; CI runs 5s)
#   CHAOS_CONVERGE   time every key's callers have to finish after the load (default 20s)
#   CHAOS_SCENARIOS  comma-separated subset (default all)
#   CHAOS_CRASH      false to skip the crash-point matrix
#   CHAOS_OUT        report path (default RELIABILITY.md)
#   CHAOS_VIZ        where porcupine's visualizations go (default $TMPDIR/claimd-chaos-viz, emptied first)
#
# Redis and PostgreSQL are started and stopped by the suite with the
# project's test tooling (internal/testenv); redis-server and postgresql come
# from scripts/test-deps.sh. claimd is built twice: as shipped, for the
# scenarios, and with -tags chaos, whose crash points the matrix uses. Every
# process the run starts is stopped by PID; all of it listens on loopback.
# Exit status: 0 clean, 1 a violation was found, 2 the run failed.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)

./scripts/test-deps.sh

work=$(mktemp -d "${TMPDIR:-/tmp}/claimd-chaos.XXXXXX")
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT

echo "chaos.sh: building into $work/bin"
go build -o "$work/bin/" ./cmd/claimd ./cmd/chaos
go build -tags chaos -o "$work/bin/claimd-chaos" ./cmd/claimd

duration=${CHAOS_DURATION:-20s}
command="make chaos"
[[ -n ${CHAOS_CONVERGE:-} ]] && command="CHAOS_CONVERGE=$CHAOS_CONVERGE $command"
[[ -n ${CHAOS_DURATION:-} ]] && command="CHAOS_DURATION=$duration $command"

"$work/bin/chaos" \
	-bin "$work/bin" \
	-work "$work" \
	-duration "$duration" \
	-converge "${CHAOS_CONVERGE:-20s}" \
	-scenarios "${CHAOS_SCENARIOS:-}" \
	-crash-matrix="${CHAOS_CRASH:-true}" \
	-out "${CHAOS_OUT:-$root/RELIABILITY.md}" \
	-viz "${CHAOS_VIZ:-${TMPDIR:-/tmp}/claimd-chaos-viz}" \
	-notes "$root/cmd/chaos/NOTES.md" \
	-command "$command"
