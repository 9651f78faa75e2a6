#!/usr/bin/env bash
# Tests the Python client and its example against a real claimd, from any
# working directory. Creates or reuses clients/python/.venv (installing
# claimd[test] only when pyproject.toml changed), checks the generated stubs
# are fresh, lints (ruff) and type-checks (mypy --strict) the package and the
# example, then runs pytest for the client and for examples/python. Any failure exits non-zero, including pytest's
# "no tests collected" (exit 5).
#
# The claimd binary is built once here and shared through $CLAIMD_BIN (set
# it yourself to test another binary); pytest alone builds its own.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=venv.sh
source "$here/venv.sh"

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
if [[ -z "${CLAIMD_BIN:-}" ]]; then
	mkdir -p "$bin_dir"
	(cd "$repo" && go build -o "$bin_dir/claimd" ./cmd/claimd)
	export CLAIMD_BIN="$bin_dir/claimd"
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
