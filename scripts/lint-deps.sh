#!/usr/bin/env bash
# lint-deps.sh makes sure the linters make lint runs that are not Go tools
# are installed: shellcheck (Debian: shellcheck). The Go ones (buf,
# staticcheck) are pinned in the Makefile and installed into the tools cache.
# Idempotent: quiet exit 0 when all is there.
set -euo pipefail

command -v shellcheck >/dev/null && exit 0

if [[ $EUID -ne 0 ]] || ! command -v apt-get >/dev/null; then
	echo "lint-deps: shellcheck is required by make lint; install it, e.g.: sudo apt-get install shellcheck" >&2
	exit 1
fi
echo "lint-deps: installing shellcheck" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends shellcheck >/dev/null
command -v shellcheck >/dev/null
