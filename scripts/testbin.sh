# shellcheck shell=bash
# Sourced by the clients' test.sh, scripts/test-clients.sh and scripts/test.sh.
#
# testbin VAR PKG DIR makes $VAR name the binary of the Go package PKG (a
# path in this repository, e.g. internal/testenv/cmd/testpg), built into DIR
# unless $VAR names one already, and exports it for the tests.
#
# testbins_name DIR and testbins_build DIR do the same for all the binaries
# every suite runs (claimd, testpg, testca, effectspec) at once: the first
# exports, for each of their variables that is unset, the path the binary
# will have in DIR; the second builds those in one go build (the packages in
# parallel, each linked once). They are two so that a caller can name the
# paths first and build in the background.
#
# Every build here uses the image's compile flags (scripts/rootfs.sh), as
# every other build of these in make test: the server is compiled once for
# all of them.

testbin_repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

testbin() {
	local var=$1 pkg=$2 dir=$3
	if [[ -z "${!var:-}" ]]; then
		mkdir -p "$dir"
		(cd "$testbin_repo" && CGO_ENABLED=0 go build -trimpath -o "$dir/${pkg##*/}" "./$pkg")
		printf -v "$var" '%s' "$dir/${pkg##*/}"
	fi
	export "${var?}"
}

declare -A testbins_pkg=(
	[CLAIMD_BIN]=cmd/claimd
	[CLAIMD_TESTPG_BIN]=internal/testenv/cmd/testpg
	[CLAIMD_TESTCA_BIN]=internal/testenv/cmd/testca
	[CLAIMD_EFFECTSPEC_BIN]=internal/testenv/cmd/effectspec
)
testbins_todo=()

testbins_name() {
	local dir=$1 var pkg
	for var in "${!testbins_pkg[@]}"; do
		if [[ -z "${!var:-}" ]]; then
			pkg=${testbins_pkg[$var]}
			testbins_todo+=("./$pkg")
			printf -v "$var" '%s' "$dir/${pkg##*/}"
			export "${var?}"
		fi
	done
}

testbins_build() {
	local dir=$1
	((${#testbins_todo[@]} > 0)) || return 0
	mkdir -p "$dir"
	(cd "$testbin_repo" && CGO_ENABLED=0 go build -trimpath -o "$dir/" "${testbins_todo[@]}")
}
