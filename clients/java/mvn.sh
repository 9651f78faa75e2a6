# Sourced by test.sh and generate.sh: where Maven keeps its repository, and
# how to run it offline once that repository is warm.
#
# The repository lives outside the checkout, in the tools cache beside the
# pinned Go tools ($CLAIMD_MAVEN_REPO to choose another), so a clean clone
# resolves once per machine and every later run is offline (mvn -o).

tools_dir="${TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/claimd-tools}"
maven_repo="${CLAIMD_MAVEN_REPO:-$tools_dir/m2}"

# mvn_run runs Maven in clients/java with the repository above: offline when
# a run with the same pom.xml succeeded online before (the stamp), online
# (once) otherwise. A failing test does not write the stamp, but neither
# does it matter: the next run resolves nothing new either way.
mvn_run() {
	local here stamp sum
	here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
	command -v mvn >/dev/null || {
		echo "clients/java: mvn is not on PATH (apt-get install maven)" >&2
		return 1
	}
	mkdir -p "$maven_repo"
	sum="$(sha256sum "$here/pom.xml" | cut -c1-16)"
	stamp="$maven_repo/.claimd-client-$sum"
	if [[ -e "$stamp" ]]; then
		(cd "$here" && mvn -B -q -Dstyle.color=never -o -Dmaven.repo.local="$maven_repo" "$@")
	else
		(cd "$here" && mvn -B -q -Dstyle.color=never -Dmaven.repo.local="$maven_repo" "$@")
		touch "$stamp"
	fi
}
