# shellcheck shell=bash
# Sourced by test.sh and generate.sh: npm_install DIR runs `npm ci` in DIR
# (and builds better-sqlite3's native addon when DIR uses it) unless its
# node_modules was installed from the same package.json, package-lock.json
# and node version, so a warm run costs nothing.

npm_install() {
	local dir="$1" stamp="$1/node_modules/.claimd-install-stamp" want
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
	if [[ -d "$dir/node_modules/better-sqlite3" ]]; then
		(cd "$dir" && npm rebuild better-sqlite3 --no-audit --no-fund --loglevel=error)
	fi
	echo "$want" >"$stamp"
}
