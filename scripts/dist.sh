#!/usr/bin/env bash
# dist.sh (make dist): every artifact of claimd under dist/, all of one
# version that scripts/version.sh derives from git, in each ecosystem's
# syntax (docs/development.md, "Versions"):
#
#   dist/claimd                          the server, for this machine (claimd --version)
#   dist/claimd-<pep440>-py3-none-any.whl, dist/claimd-<pep440>.tar.gz
#                                        the Python client, wheel and sdist
#   dist/claimd-client-<semver>.tgz      the Node client (npm pack)
#   dist/maven/                          a Maven repository holding
#                                        dev.claimd:claimd-client:<maven> (jar, pom, test jar)
#
# No tracked file is edited: the Python and Node packages are built from
# copies in a temp directory with the version written into the copy, the Java
# one with -Drevision (the pom's CI-friendly version). The builds reuse what
# make test installs (the Python venv, node_modules, the Maven repository in
# the tools cache), so after a make test nothing is downloaded but Maven's
# deploy and flatten plugins, once.
set -euo pipefail

for tool in go python3 node npm java mvn; do
	command -v "$tool" >/dev/null || {
		echo "dist.sh: $tool is not on PATH; make dist builds the Python, Node and Java clients too (Debian: apt-get install python3-venv nodejs npm openjdk-17-jdk-headless maven)" >&2
		exit 1
	}
done

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$repo/dist"
semver="$("$repo/scripts/version.sh" semver)"
pep440="$("$repo/scripts/version.sh" pep440)"
maven="$("$repo/scripts/version.sh" maven)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
rm -rf "$out"
mkdir -p "$out"

# copy_tracked DIR DEST PATHS...: the files of PATHS under DIR that git
# tracks, as they are in the working tree (so a dirty version builds what it
# says), without caches, egg-info or build outputs.
copy_tracked() {
	local dir="$1" dest="$2" f
	shift 2
	mkdir -p "$dest"
	while IFS= read -r -d '' f; do
		if [[ -e "$dir/$f" ]]; then
			mkdir -p "$dest/$(dirname "$f")"
			cp -p "$dir/$f" "$dest/$f"
		fi
	done < <(git -C "$dir" ls-files -z -- "$@")
}

echo "== dist: version $semver (Python $pep440, Maven $maven)"

echo "== dist/claimd"
(cd "$repo" && go build -ldflags "-X main.version=$semver" -o "$out/claimd" ./cmd/claimd)

echo "== the Python wheel and sdist"
# shellcheck source=../clients/python/venv.sh
source "$repo/clients/python/venv.sh"
ensure_venv # its [test] extra pins build and setuptools: no download
py_stage="$work/python"
copy_tracked "$repo/clients/python" "$py_stage" pyproject.toml README.md LICENSE src
sed -i -E "s/^version = \"[^\"]*\"$/version = \"$pep440\"/" "$py_stage/pyproject.toml"
grep -qx "version = \"$pep440\"" "$py_stage/pyproject.toml" || {
	echo "dist.sh: no version line in clients/python/pyproject.toml to stamp" >&2
	exit 1
}
"$claimd_py" -m build --quiet --no-isolation --sdist --wheel --outdir "$out" "$py_stage" >/dev/null

echo "== the npm tarball"
# shellcheck source=../clients/typescript/npm.sh
source "$repo/clients/typescript/npm.sh"
npm_install "$repo/clients/typescript"
ts_stage="$work/typescript"
copy_tracked "$repo/clients/typescript" "$ts_stage" package.json package-lock.json tsconfig.json README.md LICENSE src
ln -s "$repo/clients/typescript/node_modules" "$ts_stage/node_modules"
(
	cd "$ts_stage"
	npm version --no-git-tag-version --allow-same-version --ignore-scripts "$semver" >/dev/null
	# pack runs the prepare script, which builds dist/src with tsc.
	npm pack --pack-destination "$out" --loglevel=error >/dev/null
)

echo "== the Maven repository dist/maven"
# shellcheck source=../clients/java/mvn.sh
source "$repo/clients/java/mvn.sh"
mkdir -p "$maven_repo"
# deploy into a file: repository holds the jar, the test jar (TestClaimd)
# and the flattened pom, with the metadata that resolves a -SNAPSHOT; the
# jar's manifest names the semver (Claimd-Version), which -SNAPSHOT cannot.
# clean first: the jar plugin keeps a jar whose classes did not change, with
# the manifest of the build that made it.
(cd "$repo/clients/java" && mvn "${maven_flags[@]}" -Drevision="$maven" -Dclaimd.build="$semver" -DskipTests -Dmaven.install.skip=true \
	-DaltDeploymentRepository="claimd-dist::file://$out/maven" clean deploy 2>&1) | strip_resets

echo "== dist holds:"
(cd "$out" && find . -maxdepth 1 -type f -printf '%P\n' | sort && echo "maven/ (dev.claimd:claimd-client:$maven)")
