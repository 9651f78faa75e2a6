# shellcheck shell=bash
# Sourced by test.sh and generate.sh: where Maven keeps its repository, and
# how to run it offline once that repository is warm.
#
# The repository lives outside the checkout, in the tools cache beside the
# pinned Go tools ($CLAIMD_MAVEN_REPO to choose another), so a clean clone
# resolves once per machine and every later run is offline (mvn -o).

tools_dir="${TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/claimd-tools}"
maven_repo="${CLAIMD_MAVEN_REPO:-$tools_dir/m2}"
# Batch mode, no colours, quiet: a run prints only failures.
maven_flags=(-B -q -Dstyle.color=never -Dmaven.repo.local="$maven_repo")

# mvn_run DIR ARGS... runs Maven in the project at DIR and returns its exit
# status: offline (-o) when a run of the same pom.xml succeeded before (a stamp
# in the repository), online otherwise, to resolve what is missing once.
mvn_run() {
	local dir="$1" stamp rc=0
	shift
	command -v mvn >/dev/null || {
		echo "mvn is not on PATH (apt-get install maven)" >&2
		return 1
	}
	mkdir -p "$maven_repo"
	stamp="$maven_repo/.claimd-resolved-$(sha256sum "$dir/pom.xml" | cut -c1-16)"
	if [[ -e "$stamp" ]]; then
		(cd "$dir" && mvn "${maven_flags[@]}" -o "$@" 2>&1) | strip_resets || rc=$?
	else
		(cd "$dir" && mvn "${maven_flags[@]}" "$@" 2>&1) | strip_resets || rc=$?
		# Only a run that went through writes the stamp; a failed one may
		# not have resolved everything (a failing test just resolves again).
		if ((rc == 0)); then
			touch "$stamp"
		fi
	fi
	return "$rc"
}

# strip_resets drops the colour resets Debian's mvn prints even in batch
# mode. Callers run with pipefail, so Maven's exit status survives the pipe.
strip_resets() {
	sed -u $'s/\x1b\[0m//g'
}
