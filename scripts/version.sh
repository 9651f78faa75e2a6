#!/usr/bin/env bash
# version.sh [semver|pep440|maven]: claimd's version, derived from git, in one
# ecosystem's syntax. make build and make dist stamp every artifact with it
# (docs/development.md, "Versions", has the table):
#
#   a clean checkout at a tag vX.Y.Z      X.Y.Z in every syntax
#   anything else: N commits after the    next = X.(Y+1).0
#   last release, at commit g<sha>,         semver  next-dev.N.g<sha>[.dirty]  (claimd, npm)
#   perhaps with uncommitted changes        pep440  next.devN+g<sha>[.dirty]   (Python)
#                                           maven   next-SNAPSHOT              (Java)
#
# The last release is the newest tag vX.Y.Z reachable from HEAD; before the
# first tag it is 0.1.0, cut from the commit the Makefile's RELEASE_REF names.
# npm drops semver's "+build" part, so the commit travels in the pre-release
# ("g" keeps an all-digit sha from reading as a number). Maven has one
# development version per release line, -SNAPSHOT. Without git (an exported
# tree) N is 0 and there is no commit to name: next-dev.0, next.dev0.
set -euo pipefail

form="${1:-semver}"
case "$form" in
semver | pep440 | maven) ;;
*)
	echo "usage: version.sh [semver|pep440|maven]" >&2
	exit 2
	;;
esac

cd "$(dirname "${BASH_SOURCE[0]}")/.."
first_release=0.1.0
first_release_commit=bbfbc472e4ce84fb6322820fb8624a4a61011d08

base="$first_release" since=0 sha="" dirty="" tag=""
if git rev-parse -q --verify HEAD >/dev/null 2>&1; then
	sha="$(git rev-parse --short=7 HEAD)"
	if tag="$(git describe --tags --match 'v[0-9]*.[0-9]*.[0-9]*' --abbrev=0 2>/dev/null)"; then
		base="${tag#v}"
		since="$(git rev-list --count "$tag..HEAD")"
	else
		# A shallow clone may not hold the release commit: N is then unknown, 0.
		since="$(git rev-list --count "$first_release_commit..HEAD" 2>/dev/null || echo 0)"
	fi
	# As git describe --dirty: a change to a tracked file, staged or not.
	git update-index -q --refresh >/dev/null 2>&1 || true
	if ! git diff-index --quiet HEAD --; then
		dirty=1
	fi
fi

if [[ ! "$base" =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)$ ]]; then
	echo "version.sh: the last release tag v$base is not vX.Y.Z" >&2
	exit 1
fi
if [[ -n "$tag" && "$since" == 0 && -z "$dirty" ]]; then
	echo "$base"
	exit 0
fi
next="${BASH_REMATCH[1]}.$((BASH_REMATCH[2] + 1)).0"
case "$form" in
semver) echo "$next-dev.$since${sha:+.g$sha}${dirty:+.dirty}" ;;
pep440) echo "$next.dev$since${sha:++g$sha}${dirty:+.dirty}" ;;
maven) echo "$next-SNAPSHOT" ;;
esac
