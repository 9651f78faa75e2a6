#!/usr/bin/env bash
# Tests the TypeScript client and the Node example against a real claimd:
# installs npm packages when missing or stale, checks that src/gen is what
# `npm run generate` produces, builds, builds claimd (and testca, which makes
# the secured tests' certificates), runs both test suites (test/package.test.ts
# packs the package and installs the tarball in a fresh project outside the repo).
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

# install runs `npm ci` in $1 unless node_modules was installed from the
# same package.json, package-lock.json and node version.
install() {
  local dir="$1" stamp="$1/node_modules/.claimd-install-stamp" want
  want="$(node -e '
    const h = require("crypto").createHash("sha256");
    for (const f of ["package.json", "package-lock.json"]) h.update(require("fs").readFileSync(process.argv[1] + "/" + f));
    console.log(h.digest("hex"), process.version);' "$dir")"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return
  fi
  echo "test.sh: npm ci in ${dir#"$root"/}"
  (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  echo "$want" >"$stamp"
}

install "$here"

# Generated code must be what the pinned local plugin makes of ../../proto.
gen_tmp="$(mktemp -d)"
trap 'rm -rf "$gen_tmp"' EXIT
(cd "$here" && ./node_modules/.bin/buf generate -o "$gen_tmp")
if ! diff -r "$gen_tmp/src/gen" "$here/src/gen" >/dev/null; then
  diff -ru "$here/src/gen" "$gen_tmp/src/gen" | head -40 >&2 || true
  echo "test.sh: src/gen is stale: run 'npm run generate' in clients/typescript and commit" >&2
  exit 1
fi

(cd "$here" && npm run --silent build)

# The example links the client (file:), so it installs after the build.
install "$example"

mkdir -p "$here/.build"
(cd "$root" && go build -o "$here/.build/claimd" ./cmd/claimd)
export CLAIMD_BIN="$here/.build/claimd"
# The secured tests' CA and certificates: node cannot make X.509 ones.
(cd "$root" && go build -o "$here/.build/testca" ./internal/testenv/cmd/testca)
export CLAIMD_TESTCA_BIN="$here/.build/testca"

# One run of node's test runner over both suites; each file starts its own
# claimd on free loopback ports and stops it.
node --test --test-concurrency=3 --test-reporter=spec \
  "$here"/dist/test/*.test.js \
  "$example"/test/*.test.js
