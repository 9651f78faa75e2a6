package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
)

// installHint is appended to every missing-binary error: the fix is a package
// install, and `make test` performs it.
const installHint = "install the Debian packages redis-server and postgresql " +
	"(`make test` does it via scripts/test-deps.sh)"

// redisBinary finds redis-server on PATH.
func redisBinary() (string, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server not found on PATH; %s", installHint)
	}
	return path, nil
}

// postgresBinaries returns initdb and postgres from one installation: first
// PATH (following symlinks, so both come from the same version's directory),
// then the highest /usr/lib/postgresql/<version>/bin, where Debian installs them
// without putting them on PATH.
func postgresBinaries() (initdb, postgres string, err error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			if dir := filepath.Dir(real); isExecutable(filepath.Join(dir, "postgres")) {
				return real, filepath.Join(dir, "postgres"), nil
			}
		}
		if q, err := exec.LookPath("postgres"); err == nil {
			return p, q, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, dir := range dirs {
		i, p := filepath.Join(dir, "initdb"), filepath.Join(dir, "postgres")
		if isExecutable(i) && isExecutable(p) {
			return i, p, nil
		}
	}
	return "", "", fmt.Errorf("PostgreSQL's initdb and postgres not found on PATH or in /usr/lib/postgresql/*/bin; %s",
		installHint)
}

// pgVersion reads the major version from /usr/lib/postgresql/<version>/bin;
// numeric, so 15 sorts above 9.6.
func pgVersion(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
