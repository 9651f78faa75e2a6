#!/usr/bin/env bash
# dist-test.sh (make dist-test; make test runs it): make dist, then each
# artifact as a stranger gets it, in a temp directory outside the repository:
#
#   - every artifact carries the version scripts/version.sh gives, in its
#     ecosystem's syntax, and dist/claimd --version says it;
#   - Python: a fresh venv installs dist's wheel as clients/python/README.md
#     says (its dependencies come from the package index or pip's cache) and
#     guards one event twice through it against dist/claimd;
#   - Node: a fresh project installs dist's tarball as clients/typescript's
#     README says and does the same;
#   - Java: a copy of examples/java builds with its README's command for a
#     copy outside the checkout (-Dclaimd.repository=file://…/dist/maven,
#     CLAIMD_BIN=…/dist/claimd), and its tests pass there. Its Maven
#     repository is a fresh one seeded with the tools cache minus dev.claimd,
#     so the client can only come from dist/maven.
#
# Exits non-zero on the first failure, with what differed.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$repo/dist"
semver="$("$repo/scripts/version.sh" semver)"
pep440="$("$repo/scripts/version.sh" pep440)"
maven="$("$repo/scripts/version.sh" maven)"

"$repo/scripts/dist.sh"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
case "$work/" in
"$repo"/*)
	echo "dist-test.sh: $work is inside the repository" >&2
	exit 1
	;;
esac

# first_command README: the first line of README's first ```sh block, the
# install line a client's README opens with; run with CLAIMD set to the
# checkout, as the README says.
first_command() {
	local line
	line="$(awk '/^```sh$/ { getline; print; exit }' "$1")"
	[[ -n "$line" ]] || fail "$1 opens with no sh block"
	echo "$line"
}

fail() {
	echo "dist-test.sh: $*" >&2
	exit 1
}

# only GLOB: the one file the glob names, or a failure naming what it found.
only() {
	local files
	files=$(compgen -G "$1" || true)
	[[ -n "$files" && "$(wc -l <<<"$files")" == 1 ]] || fail "want exactly one $1, found: ${files:-none}"
	echo "$files"
}

echo "== dist-test: one version in every artifact"
got="$("$out/claimd" --version)"
[[ "$got" == "claimd $semver "* ]] || fail "dist/claimd --version = $got, want claimd $semver"
wheel="$(only "$out/claimd-*-py3-none-any.whl")"
[[ "$wheel" == "$out/claimd-$pep440-py3-none-any.whl" ]] || fail "wheel $wheel, want version $pep440"
only "$out/claimd-$pep440.tar.gz" >/dev/null
tarball="$(only "$out/claimd-client-*.tgz")"
[[ "$tarball" == "$out/claimd-client-$semver.tgz" ]] || fail "npm tarball $tarball, want version $semver"
pom="$(only "$out/maven/dev/claimd/claimd-client/$maven/claimd-client-*.pom")"
grep -q "<version>$maven</version>" "$pom" || fail "$pom does not name version $maven"
jar="${pom%.pom}.jar"
manifest="$(unzip -p "$jar" META-INF/MANIFEST.MF | tr -d '\r')"
grep -qx "Claimd-Version: $semver" <<<"$manifest" || fail "$jar's manifest has no Claimd-Version: $semver:
$manifest"
if grep -qF "<version>\${revision}</version>" "$pom"; then
	fail "$pom still says \${revision}: a consumer cannot resolve it"
fi

echo "== dist-test: the wheel in a fresh venv"
python3 -m venv "$work/venv"
install="$(first_command "$repo/clients/python/README.md")"
(cd "$work" && CLAIMD="$repo" PATH="$work/venv/bin:$PATH" PIP_DISABLE_PIP_VERSION_CHECK=1 eval "$install" >/dev/null)
# The consumer starts claimd with claimd.testing: the [testing] extra.
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check "${wheel}[testing]"
mkdir "$work/py"
cat >"$work/py/main.py" <<'EOF'
import json
import sys
from importlib.metadata import version
from pathlib import Path

import claimd
from claimd.testing import ClaimdServer

server = ClaimdServer.start(Path(sys.argv[1]), Path(sys.argv[2]))
answers = []
try:
    with claimd.Client(server.grpc_address) as client:

        @client.guarded("dist-test", "stripe")
        def charge(g):
            return {"charged": True}

        for _ in range(2):
            r = charge("evt_dist_py")
            answers.append(f"{r.status} {r.body.decode()} {r.outcome.name}")
finally:
    server.stop()
print(json.dumps({"version": version("claimd"), "module": claimd.__file__, "answers": answers}))
EOF
got="$(cd "$work/py" && "$work/venv/bin/python" main.py "$out/claimd" "$work/py-data")"
want="{\"version\": \"$pep440\", \"module\": \"$work/venv/lib/python3.$(python3 -c 'import sys; print(sys.version_info[1])')/site-packages/claimd/__init__.py\", \"answers\": [\"200 {\\\"charged\\\":true} ACQUIRED\", \"200 {\\\"charged\\\":true} DUPLICATE\"]}"
[[ "$got" == "$want" ]] || fail "the wheel's consumer printed
  $got
want
  $want"

echo "== dist-test: the tarball in a fresh Node project"
mkdir "$work/node"
echo '{"name": "claimd-dist-test", "private": true, "type": "module"}' >"$work/node/package.json"
install="$(first_command "$repo/clients/typescript/README.md")"
(cd "$work/node" && CLAIMD="$repo" npm_config_prefer_offline=true npm_config_audit=false npm_config_fund=false npm_config_loglevel=error eval "$install" >/dev/null)
cat >"$work/node/main.js" <<'EOF'
import { readFileSync } from "node:fs";
import { createClient, guard, Outcome } from "@claimd/client";
import { startClaimd } from "@claimd/client/testing";

const server = await startClaimd({ bin: process.env.CLAIMD_BIN });
const client = createClient(server.target);
const answers = [];
try {
  for (let i = 0; i < 2; i++) {
    const r = await guard(client, { namespace: "dist-test", provider: "stripe", eventId: "evt_dist_node" }, () => ({ charged: true }));
    answers.push(`${r.status} ${Buffer.from(r.body).toString()} ${Outcome[r.outcome]}`);
  }
} finally {
  client.close();
  await server.stop();
}
const { version } = JSON.parse(readFileSync("node_modules/@claimd/client/package.json", "utf8"));
console.log(JSON.stringify({ version, answers }));
EOF
got="$(cd "$work/node" && CLAIMD_BIN="$out/claimd" node main.js)"
want="{\"version\":\"$semver\",\"answers\":[\"200 {\\\"charged\\\":true} ACQUIRED\",\"200 {\\\"charged\\\":true} DUPLICATE\"]}"
[[ "$got" == "$want" ]] || fail "the tarball's consumer printed
  $got
want
  $want"

echo "== dist-test: examples/java outside the repository, the client from dist/maven"
# shellcheck source=../clients/java/mvn.sh
source "$repo/clients/java/mvn.sh"
cp -r "$maven_repo" "$work/m2"
rm -rf "$work/m2/dev/claimd" "$work"/m2/.claimd-resolved-*
cp -r "$repo/examples/java" "$work/stripe-receiver"
rm -rf "$work/stripe-receiver/target" "$work/stripe-receiver/cp.txt" "$work/stripe-receiver/ledger.db"
# The README's command for a copy outside the checkout, as written; Maven's
# repository comes through MAVEN_OPTS; the client's version is make dist's
# (the pom's default is the checked-in one, the same but at a release).
# shellcheck disable=SC2016 # the README's text, $CLAIMD unexpanded
build="$(grep -m1 '^CLAIMD_BIN="$CLAIMD/dist/claimd" mvn ' "$repo/examples/java/README.md")" ||
	fail "examples/java/README.md has no CLAIMD_BIN=\"\$CLAIMD/dist/claimd\" mvn … line"
(cd "$work/stripe-receiver" && CLAIMD="$repo" MAVEN_OPTS="-Dmaven.repo.local=$work/m2" \
	eval "$build -B -Dstyle.color=never -Dclaimd.version=$maven" 2>&1) | strip_resets
grep -q "$work/m2/dev/claimd/claimd-client/$maven/claimd-client-$maven.jar" "$work/stripe-receiver/cp.txt" ||
	fail "the example's classpath has no claimd-client $maven: $(cat "$work/stripe-receiver/cp.txt")"
grep -q '>claimd-dist=' "$work/m2/dev/claimd/claimd-client/$maven/_remote.repositories" ||
	fail "claimd-client did not come from dist/maven: $(cat "$work/m2/dev/claimd/claimd-client/$maven/_remote.repositories")"
tests=0 failed=0 skipped=0
for f in "$work"/stripe-receiver/target/surefire-reports/TEST-*.xml; do
	[[ -e "$f" ]] || continue
	line="$(grep -m1 -o '<testsuite [^>]*>' "$f")"
	tests=$((tests + $(sed -E 's/.* tests="([0-9]+)".*/\1/' <<<"$line")))
	failed=$((failed + $(sed -E 's/.* errors="([0-9]+)".*/\1/' <<<"$line") + $(sed -E 's/.* failures="([0-9]+)".*/\1/' <<<"$line")))
	skipped=$((skipped + $(sed -E 's/.* skipped="([0-9]+)".*/\1/' <<<"$line")))
done
# Outside the checkout only the comparison with the repository's fixture
# has nothing to compare with.
((tests > 1 && failed == 0 && skipped == 1)) || fail "examples/java outside the repository: $tests tests, $failed failed, $skipped skipped; want all but the fixture comparison to run and pass"

echo "dist-test: ok, $semver (Python $pep440, Maven $maven): dist/claimd, the wheel, the tarball and examples/java outside the repository ($((tests - skipped)) tests)"
