#!/usr/bin/env bash
# Tests the TypeScript client and the Node example against a real claimd:
# installs npm packages when missing or stale, checks that src/gen is what
# generate.sh produces, builds, builds claimd (and testca, which makes
# the secured tests' certificates), starts a PostgreSQL for the effect tests
# (testpg), runs both test suites (test/package.test.ts packs the package and
# installs the tarball in a fresh project outside the repo), then effectspec's
# crash and zombie scenarios with test/fxreceiver.ts on SQLite and PostgreSQL.
# Works from any directory; exits non-zero on any failure.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
example="$root/examples/node"

for tool in node npm go; do
  command -v "$tool" >/dev/null || { echo "test.sh: $tool is not on PATH" >&2; exit 1; }
done
node_major="$(node -p 'process.versions.node.split(".")[0]')"
if (( node_major < 20 )); then
  echo "test.sh: node >= 20 required, found $(node --version)" >&2
  exit 1
fi

# shellcheck source=npm.sh
source "$here/npm.sh"
# shellcheck source=../../scripts/testbin.sh
source "$root/scripts/testbin.sh"
npm_install "$here"

# Generated code must be what the pinned local plugin makes of ../../proto.
"$here/generate.sh" --check

(cd "$here" && npm run --silent build)

# The example links the client (file:), so it installs after the build; its
# better-sqlite3 addon is the client's, copied (npm.sh).
npm_install "$example" "$here"

# Each Go binary is built here unless its variable names one already
# (scripts/test-clients.sh builds them once for every suite).
mkdir -p "$here/.build"
testbin CLAIMD_BIN cmd/claimd "$here/.build"
# The secured tests' CA and certificates: node cannot make X.509 ones.
testbin CLAIMD_TESTCA_BIN internal/testenv/cmd/testca "$here/.build"

# The effect tests' PostgreSQL (clients/guardspec/README.md, "The runner's
# database"): a real server in a temp directory, stopped when its stdin
# closes, i.e. when this script ends, however it ends.
testbin CLAIMD_TESTPG_BIN internal/testenv/cmd/testpg "$here/.build"
coproc PG { "$CLAIMD_TESTPG_BIN"; }
read -r pg_url <&"${PG[0]}" || { echo "test.sh: testpg printed no URL" >&2; exit 1; }
export CLAIMD_TEST_POSTGRES_URL="$pg_url"

# One run of node's test runner over both suites; each file starts its own
# claimd on free loopback ports and stops it.
node --test --test-concurrency=3 --test-reporter=spec \
  "$here"/dist/test/*.test.js \
  "$example"/test/*.test.js

# The crash and zombie scenarios need processes of their own: effectspec
# (clients/guardspec/README.md, "Effect processes") kills, stops and wakes
# test/fxreceiver.ts on SQLite and on PostgreSQL, with a claimd it starts
# from the same binary. A clean exit is not enough: every scenario must
# print its counts with every event written exactly once.
testbin CLAIMD_EFFECTSPEC_BIN internal/testenv/cmd/effectspec "$here/.build"
fx_dir="$(mktemp -d)"
trap 'rm -rf "$fx_dir"' EXIT
run_effectspec() {
  local db="$1" dialect="$2" out s
  if ! out="$("$CLAIMD_EFFECTSPEC_BIN" -claimd-bin "$CLAIMD_BIN" -db "$db" -events 50 -- node "$here/dist/test/fxreceiver.js" 2>&1)"; then
    echo "$out"
    echo "test.sh: effectspec on $dialect failed" >&2
    return 1
  fi
  echo "$out"
  for s in crash zombie-new-first zombie-old-first raise; do
    if ! grep -Eq "^$s: 50 events, 50 ledger rows, 0 written twice, 0 never written, " <<<"$out"; then
      echo "test.sh: effectspec on $dialect printed no clean counts line for $s" >&2
      return 1
    fi
  done
}
run_effectspec "sqlite:$fx_dir/effects.db" sqlite
run_effectspec "$CLAIMD_TEST_POSTGRES_URL" postgres
