# shellcheck shell=bash
# Sourced by test.sh and generate.sh: makes sure clients/python/.venv exists
# and holds this package (editable) with its [test] extra, the versions
# pinned in pyproject.toml. The install runs only when pyproject.toml or the
# interpreter changed since the last one, so a warm run costs nothing.

claimd_py_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
claimd_venv="$claimd_py_dir/.venv"
claimd_py="$claimd_venv/bin/python"

ensure_venv() {
	local base="${PYTHON:-python3}"
	local want
	want="$(sha256sum <"$claimd_py_dir/pyproject.toml" | cut -d" " -f1) $("$base" -c 'import sys; print(sys.version)' | head -1)"
	if [[ -x "$claimd_py" && -f "$claimd_venv/.claimd-stamp" && "$(cat "$claimd_venv/.claimd-stamp")" == "$want" ]] &&
		"$claimd_py" -c 'import claimd' 2>/dev/null; then
		return 0
	fi
	if ! "$claimd_py" -c 'import sys' 2>/dev/null; then
		rm -rf "$claimd_venv"
		"$base" -m venv "$claimd_venv"
	fi
	echo "installing claimd[test] into $claimd_venv" >&2
	"$claimd_py" -m pip install --quiet --disable-pip-version-check -e "${claimd_py_dir}[test]"
	echo "$want" >"$claimd_venv/.claimd-stamp"
}
