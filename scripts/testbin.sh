# shellcheck shell=bash
# Sourced by the clients' test.sh. testbin VAR PKG DIR makes $VAR name the
# binary of the Go package PKG (a path in this repository, e.g.
# internal/testenv/cmd/testpg), built into DIR unless $VAR names one already
# (scripts/test-clients.sh builds them all in one go build for every suite),
# and exports it for the tests.

testbin_repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

testbin() {
	local var=$1 pkg=$2 dir=$3
	if [[ -z "${!var:-}" ]]; then
		mkdir -p "$dir"
		# The image's compile flags (scripts/rootfs.sh), as every other build
		# of these in make test: the server is compiled once for all of them.
		(cd "$testbin_repo" && CGO_ENABLED=0 go build -trimpath -o "$dir/${pkg##*/}" "./$pkg")
		printf -v "$var" '%s' "$dir/${pkg##*/}"
	fi
	export "${var?}"
}
