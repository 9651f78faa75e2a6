#!/usr/bin/env bash
# test-deps.sh makes sure the servers claimd's tests start themselves are
# installed: redis-server and PostgreSQL (initdb, postgres). internal/testenv
# runs them in temp dirs on random loopback ports, so the packaged services are
# never needed and are kept stopped. The doc test also needs jq and grpcurl,
# and the on-call page's browser test (cmd/claimd/ui_browser_test.go) Debian's
# chromium, with a font for its screenshots.
# Idempotent: quiet exit 0 when all is there.
set -euo pipefail

# have_postgres mirrors internal/testenv: PATH first, then Debian's versioned
# directories, which are not on PATH.
have_postgres() {
	if command -v initdb >/dev/null && command -v postgres >/dev/null; then
		return 0
	fi
	local bin
	for bin in /usr/lib/postgresql/*/bin; do
		[[ -x $bin/initdb && -x $bin/postgres ]] && return 0
	done
	return 1
}

# The doc test (docs/doc_test.go) runs the documented grpcurl commands with
# the pinned grpcurl, where `make grpcurl` installs it (quiet when it is
# there). On a fresh machine that is a compile (about a minute on two cores),
# so it runs while apt-get downloads and unpacks; finish waits for it and
# fails this script if it failed.
grpcurl_log="$(mktemp)"
"${MAKE:-make}" --no-print-directory -C "$(dirname "$0")/.." grpcurl >"$grpcurl_log" 2>&1 &
grpcurl_pid=$!
policy=/usr/sbin/policy-rc.d
policy_made=""
finish() {
	local rc=$?
	[[ -z $policy_made ]] || rm -f "$policy"
	if ! wait "$grpcurl_pid"; then
		cat "$grpcurl_log" >&2
		echo "test-deps: make grpcurl failed" >&2
		rc=1
	fi
	rm -f "$grpcurl_log"
	exit "$rc"
}
trap finish EXIT

# redis-cli (Debian: redis-tools, a dependency of redis-server) creates the
# test Redis Cluster; jq is in the documented commands the doc test runs.
have_all() {
	command -v redis-server >/dev/null && command -v redis-cli >/dev/null && command -v jq >/dev/null && have_postgres &&
		command -v chromium >/dev/null && [[ -d /usr/share/fonts/truetype/dejavu ]]
}

have_all && exit 0

packages=(redis-server redis-tools postgresql jq chromium fonts-dejavu-core)
if [[ $EUID -ne 0 ]] || ! command -v apt-get >/dev/null; then
	echo "test-deps: redis-server, PostgreSQL (initdb, postgres), jq and chromium are required by the tests." >&2
	echo "test-deps: install them, e.g.: sudo apt-get install ${packages[*]}" >&2
	exit 1
fi

# Keep maintainer scripts from starting the packaged services (they would hold
# 6379/5432 and run for nothing): invoke-rc.d obeys policy-rc.d exit code 101.
# Only a policy file we created is removed again.
if [[ ! -e $policy ]]; then
	policy_made=1
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod 755 "$policy"
fi

echo "test-deps: installing ${packages[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null

# Belt and braces: if a service started anyway (systemd ignores policy-rc.d
# on some setups), stop it and keep it from starting at boot.
for svc in redis-server postgresql; do
	if [[ -d /run/systemd/system ]]; then
		systemctl disable --now "$svc" >/dev/null 2>&1 || true
	elif command -v service >/dev/null; then
		service "$svc" stop >/dev/null 2>&1 || true
		update-rc.d "$svc" disable >/dev/null 2>&1 || true
	fi
done

if ! have_all; then
	echo "test-deps: installed ${packages[*]} but redis-server, jq, initdb, postgres or chromium is still missing" >&2
	exit 1
fi
