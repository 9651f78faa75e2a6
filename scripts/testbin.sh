# shellcheck shell=bash
# Sourced by scripts/test.sh, scripts/test-clients.sh and the clients'
# test.sh: the Go binaries the test suites run (claimd and the test tools),
# each named to the tests by its variable, built only where that variable
# names none already.
#
#   testbins DIR      every one of them (testbin_pkgs), in one go build into
#                     DIR: make test builds them so, once, before any suite
#   testbin VAR PKG DIR  the one binary of package PKG (a path in this
#                     repository, e.g. internal/testenv/cmd/testpg), for a
#                     client's test.sh run alone
#
# Both export the variables they set.

testbin_repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=times.sh
source "$testbin_repo/scripts/times.sh"

# testbin_pkgs: each variable and the package whose binary it names.
declare -gA testbin_pkgs=(
	[CLAIMD_BIN]=cmd/claimd
	[CLAIMD_TESTPG_BIN]=internal/testenv/cmd/testpg
	[CLAIMD_TESTCA_BIN]=internal/testenv/cmd/testca
	[CLAIMD_EFFECTSPEC_BIN]=internal/testenv/cmd/effectspec
)

# testbin_build DIR PKG... compiles the packages PKG into DIR in one go build
# (its packages in parallel) and says how long it took. The image's compile
# flags (scripts/rootfs.sh), as every non-race build in make test: the
# server is compiled once for all of them.
testbin_build() {
	local dir=$1 start=$SECONDS
	shift
	mkdir -p "$dir"
	(cd "$testbin_repo" && CGO_ENABLED=0 go build -trimpath -o "$dir/" "${@/#/./}" && times >"$dir/.build.times") || {
		echo "go build $* failed" >&2
		return 1
	}
	echo "go build $*: $((SECONDS - start)) s, $(cpu_seconds <"$dir/.build.times") s of CPU"
}

testbins() {
	local dir=$1 var pkgs=()
	for var in "${!testbin_pkgs[@]}"; do
		if [[ -z "${!var:-}" ]]; then
			pkgs+=("${testbin_pkgs[$var]}")
			printf -v "$var" '%s' "$dir/${testbin_pkgs[$var]##*/}"
		fi
		export "${var?}"
	done
	((${#pkgs[@]} == 0)) || testbin_build "$dir" "${pkgs[@]}"
}

testbin() {
	local var=$1 pkg=$2 dir=$3
	if [[ -z "${!var:-}" ]]; then
		testbin_build "$dir" "$pkg" || return
		printf -v "$var" '%s' "$dir/${pkg##*/}"
	fi
	export "${var?}"
}
