#!/usr/bin/env bash
# Tests the Java client and its example against a real claimd, from any
# working directory: checks that src/generated/java is what generate.sh
# produces, builds claimd once ($CLAIMD_BIN, shared with the tests) and testca
# (the secured tests' certificates), testpg and effectspec, each unless its
# variable names one already ($CLAIMD_TESTCA_BIN, $CLAIMD_TESTPG_BIN,
# $CLAIMD_EFFECTSPEC_BIN: scripts/test-clients.sh builds them once for
# every suite), starts a PostgreSQL with testpg for the
# effect fence ($CLAIMD_TEST_POSTGRES_URL), runs the
# client's tests with mvn install (unit tests, the guardspec scenarios, the
# typed calls; install puts the client and its test jar in the local
# repository), then effectspec with the Java receiver on SQLite and on
# PostgreSQL (-events 50) and once with a receiver broken on purpose, which it
# must fail (each run counts as one test), and then the
# example's tests with mvn verify. Maven resolves
# online the first time only (see mvn.sh). Exits non-zero on any failure and
# ends with a "N passed, N failed" line.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
example="$repo/examples/java"
# shellcheck source=mvn.sh
source "$here/mvn.sh"
# shellcheck source=../../scripts/testbin.sh
source "$repo/scripts/testbin.sh"

for tool in java mvn go; do
	command -v "$tool" >/dev/null || {
		echo "test.sh: $tool is not on PATH (Debian: apt-get install openjdk-17-jdk-headless maven; and Go)" >&2
		exit 1
	}
done

"$here/generate.sh" --check

# Every JVM of the suite lives seconds (Maven, Surefire's fork, effectspec's
# receivers, killed and restarted again and again): C1 alone compiles what
# they run for a fraction of the CPU that C2's optimisation spends, and the
# serial collector starts no GC threads. Test speed only; the client is
# compiled and packaged the same either way.
jvm_opts=(-XX:TieredStopAtLevel=1 -XX:+UseSerialGC)
export MAVEN_OPTS="${MAVEN_OPTS:+$MAVEN_OPTS }${jvm_opts[*]}"
maven_flags+=("-DargLine=${jvm_opts[*]}")

mkdir -p "$here/.build"
testbin CLAIMD_BIN cmd/claimd "$here/.build"
# The secured tests' CA and certificates, made as every client's are.
testbin CLAIMD_TESTCA_BIN internal/testenv/cmd/testca "$here/.build"

# A real PostgreSQL for the effect fence's tests (SQLite needs no server):
# testpg prints its URL once it answers and stops when its stdin closes, so
# this script takes it down with it, however it ends.
testbin CLAIMD_TESTPG_BIN internal/testenv/cmd/testpg "$here/.build"
coproc PG { "$CLAIMD_TESTPG_BIN"; }
pg_url=""
read -r pg_url <&"${PG[0]}" || true
if [[ -z "$pg_url" ]]; then
	echo "test.sh: testpg did not start PostgreSQL" >&2
	exit 1
fi
export CLAIMD_TEST_POSTGRES_URL="$pg_url"

# effectspec drives the receiver (src/test/java/.../testing/EffectReceiver.java)
# through crashes and zombies with real signals (guardspec README, "Effect
# processes").
testbin CLAIMD_EFFECTSPEC_BIN internal/testenv/cmd/effectspec "$here/.build"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

rm -rf "$here/target/surefire-reports" "$example/target/surefire-reports"
rc=0
# install also writes the test classpath the receiver runs with.
mvn_run "$here" install dependency:build-classpath -Dmdep.outputFile="$here/.build/test-classpath.txt" || rc=$?

# test_classpath: the test classes, the classes and the test dependencies.
test_classpath() {
	echo "$here/target/test-classes:$here/target/classes:$(cat "$here/.build/test-classpath.txt")"
}

# effectspec_run DB: one effectspec run on DB; prints its counts lines.
effectspec_passed=0 effectspec_failed=0
effectspec_run() {
	local cp
	cp="$(test_classpath)"
	if "$CLAIMD_EFFECTSPEC_BIN" -claimd-bin "$CLAIMD_BIN" -db "$1" -events 50 -- \
		java "${jvm_opts[@]}" -cp "$cp" dev.claimd.client.testing.EffectReceiver 2>&1 | sed -E 's/, receiver java .*//'; then
		effectspec_passed=$((effectspec_passed + 1))
	else
		effectspec_failed=$((effectspec_failed + 1))
	fi
}
# The negative control: a receiver that writes its ledger row outside the
# effect (--unfenced) must fail effectspec; a raise inside the effect then
# leaves the row behind and the retry writes it again.
effectspec_control() {
	local cp
	cp="$(test_classpath)"
	local out
	if out="$("$CLAIMD_EFFECTSPEC_BIN" -claimd-bin "$CLAIMD_BIN" -db "$CLAIMD_TEST_POSTGRES_URL" -events 5 -scenarios raise -- \
		java "${jvm_opts[@]}" -cp "$cp" dev.claimd.client.testing.EffectReceiver --unfenced 2>&1)"; then
		echo "effectspec passed the unfenced receiver; it must fail it:" >&2
		echo "$out" >&2
		effectspec_failed=$((effectspec_failed + 1))
	elif grep -qE 'written [0-9]+ times' <<<"$out"; then
		echo "effectspec control: the unfenced receiver fails ($(grep -cE 'written [0-9]+ times' <<<"$out") events written more than once)"
		effectspec_passed=$((effectspec_passed + 1))
	else
		echo "effectspec failed the unfenced receiver for another reason than a double write:" >&2
		echo "$out" >&2
		effectspec_failed=$((effectspec_failed + 1))
	fi
}
if ((rc == 0)); then
	effectspec_run "sqlite:$scratch/effectspec.db"
	effectspec_run "$CLAIMD_TEST_POSTGRES_URL"
	effectspec_control
	if ((effectspec_failed > 0)); then
		rc=1
	fi
fi
if ((rc == 0)); then
	mvn_run "$example" verify || rc=$?
fi

# Surefire says nothing under -q when all pass: count its reports.
tests=0 failed=0
for f in "$here"/target/surefire-reports/TEST-*.xml "$example"/target/surefire-reports/TEST-*.xml; do
	[[ -e "$f" ]] || continue
	line="$(grep -m1 -o '<testsuite [^>]*>' "$f")"
	n="$(sed -E 's/.* tests="([0-9]+)".*/\1/' <<<"$line")"
	e="$(sed -E 's/.* errors="([0-9]+)".*/\1/' <<<"$line")"
	x="$(sed -E 's/.* failures="([0-9]+)".*/\1/' <<<"$line")"
	tests=$((tests + n))
	failed=$((failed + e + x))
done
# Each effectspec run (SQLite, PostgreSQL, the control) counts as one test.
tests=$((tests + effectspec_passed + effectspec_failed))
failed=$((failed + effectspec_failed))
if ((tests == 0)); then
	echo "java: no tests ran" >&2
	exit 1
fi
echo "java: $((tests - failed)) passed, $failed failed"
exit "$rc"
