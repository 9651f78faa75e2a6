# shellcheck shell=bash
# Sourced by test.sh and generate.sh: npm_install DIR [FROM] runs `npm ci`
# in DIR (and builds better-sqlite3's native addon when DIR uses it) unless
# its node_modules was installed from the same package.json,
# package-lock.json and node version, so a warm run costs nothing.
#
# FROM is another directory whose node_modules holds a built better-sqlite3
# (test.sh passes the client's for the Node example): when it is the same
# version, its addon is copied instead of compiled again. No prebuilt addon
# is downloadable offline, and compiling one (SQLite and its C++ binding)
# takes about half a minute of CPU (below). The copy is what a rebuild would
# make: the same sources, compiler and node; a copy that does not load
# falls back to the rebuild.

npm_install() {
	local dir="$1" from="${2:-}" stamp="$1/node_modules/.claimd-install-stamp" want
	want="$(node -e '
    const h = require("crypto").createHash("sha256");
    for (const f of ["package.json", "package-lock.json"]) h.update(require("fs").readFileSync(process.argv[1] + "/" + f));
    console.log(h.digest("hex"), process.version);' "$dir")"
	if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
		return
	fi
	echo "npm ci in $dir" >&2
	(cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
	# better-sqlite3 (the effect tests' SQLite driver) is native: its
	# install script fetches or compiles the addon. No other script runs.
	# Compiled at -O1 (the last -O wins over its gyp files' -O3): half the
	# CPU (36 against 72 s), for a SQLite the tests ask little speed of;
	# what the addon does is the same at any level.
	if [[ -d "$dir/node_modules/better-sqlite3" ]] && ! copy_sqlite_addon "$from" "$dir"; then
		(cd "$dir" && CFLAGS="${CFLAGS:+$CFLAGS }-O1" CXXFLAGS="${CXXFLAGS:+$CXXFLAGS }-O1" \
			npm rebuild better-sqlite3 --no-audit --no-fund --loglevel=error)
	fi
	echo "$want" >"$stamp"
}

# copy_sqlite_addon FROM DIR copies better-sqlite3's built addon from FROM's
# node_modules into DIR's when both hold the same version, and succeeds when
# DIR's better-sqlite3 then opens a database.
copy_sqlite_addon() {
	local from="$1/node_modules/better-sqlite3" to="$2/node_modules/better-sqlite3"
	local addon=build/Release/better_sqlite3.node
	[[ -n "$1" && -f "$from/$addon" ]] || return 1
	[[ "$(node -p 'require(process.argv[1]).version' "$from/package.json")" == \
		"$(node -p 'require(process.argv[1]).version' "$to/package.json")" ]] || return 1
	mkdir -p "$to/build/Release"
	cp "$from/$addon" "$to/$addon"
	if ! node -e 'const D = require(process.argv[1]); new D(":memory:").close();' "$to" 2>/dev/null; then
		rm -rf "$to/build"
		return 1
	fi
	echo "better-sqlite3: the addon built in $1, copied" >&2
}
