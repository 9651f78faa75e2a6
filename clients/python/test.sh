#!/usr/bin/env bash
# Tests the Python client and its example against a real claimd, from any
# working directory. Creates or reuses clients/python/.venv (installing
# claimd[test] only when pyproject.toml changed), checks the generated stubs
# are fresh, lints (ruff) and type-checks (mypy --strict) the package and the
# example, then runs pytest for the client and for examples/python. Any failure exits non-zero, including pytest's
# "no tests collected" (exit 5).
#
# Transports: the whole suite runs over gRPC, the Client's default for a
# host:port target; over Connect run only the tests marked both_transports
# (tests/conftest.py): the typed calls and their error mapping
# (test_client.py), credentials, tokens and refusals (test_secure.py), the
# asyncio client's calls (test_aio.py), a Powertools layer choosing its
# transport from its address, plus test_connect.py, which is Connect's own.
# The guard, function mode, Powertools and the effect fence run once: they
# sit above the client's call layer and make the same calls whatever carries
# them, so a second run over Connect checked the same decisions again, for
# two thirds of pytest's time (warm: 801 tests in 196 s over both, 531 in
# 65 s). `pytest --all-transports` runs everything over both.
#
# The claimd binary is built once here and shared through $CLAIMD_BIN (set
# it yourself to test another binary); pytest alone builds its own. So are
# testpg and effectspec, unless $CLAIMD_TESTPG_BIN and $CLAIMD_EFFECTSPEC_BIN
# name them (scripts/test-clients.sh builds all of them once for every suite). The
# effect fence's tests need PostgreSQL: this script starts one with
# internal/testenv/cmd/testpg (stopped when the script ends) and exports
# $CLAIMD_TEST_POSTGRES_URL, unless it is set already; without it they fail.
# Last, internal/testenv/cmd/effectspec kills and pauses tests/fxreceiver.py
# and tests/fxreceiver_aio.py (crash after the commit, zombie past its lease)
# on SQLite and PostgreSQL.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=venv.sh
source "$here/venv.sh"
# shellcheck source=../../scripts/testbin.sh
source "$repo/scripts/testbin.sh"

ensure_venv
"$here/generate.sh" --check
(
	cd "$here"
	examples="$repo/examples/python"
	.venv/bin/ruff check --quiet --config pyproject.toml src tests "$examples"
	.venv/bin/ruff format --quiet --check --config pyproject.toml src tests "$examples"
	"$claimd_py" -m mypy --no-error-summary
)
echo "ruff and mypy --strict: ok"

bin_dir="$here/.cache/bin"
testbin CLAIMD_BIN cmd/claimd "$bin_dir"

if [[ -z "${CLAIMD_TEST_POSTGRES_URL:-}" ]]; then
	testbin CLAIMD_TESTPG_BIN internal/testenv/cmd/testpg "$bin_dir"
	# testpg prints the URL once PostgreSQL answers, and stops it when its
	# standard input (this script's end of the coprocess) closes.
	coproc PG { "$CLAIMD_TESTPG_BIN"; }
	read -r CLAIMD_TEST_POSTGRES_URL <&"${PG[0]}" || {
		echo "testpg did not start PostgreSQL" >&2
		exit 1
	}
	export CLAIMD_TEST_POSTGRES_URL
fi

run_pytest() {
	local dir="$1"
	shift
	local rc=0
	(cd "$dir" && "$claimd_py" -m pytest "$@") || rc=$?
	case "$rc" in
	0) ;;
	5)
		echo "pytest in $dir collected no tests" >&2
		exit 1
		;;
	*) exit "$rc" ;;
	esac
}

run_pytest "$here" -q tests
run_pytest "$repo/examples/python" -q

# effectspec: the crash and zombie scenarios with real signals, once per dialect.
testbin CLAIMD_EFFECTSPEC_BIN internal/testenv/cmd/effectspec "$bin_dir"
fx_dir="$(mktemp -d)"
trap 'rm -rf "$fx_dir"' EXIT
for receiver in fxreceiver.py fxreceiver_aio.py; do
	for db in "sqlite:$fx_dir/${receiver%.py}.db" "$CLAIMD_TEST_POSTGRES_URL"; do
		"$CLAIMD_EFFECTSPEC_BIN" -claimd-bin "$CLAIMD_BIN" -db "$db" -events 50 -- \
			"$claimd_py" "$here/tests/$receiver"
	done
done
