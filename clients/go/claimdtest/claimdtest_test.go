package claimdtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildToolUsesBinEnv: a binary named by the package's variable is used
// as it is, and a variable naming no executable is an error that names it,
// not a silent build.
func TestBuildToolUsesBinEnv(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "claimd")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CLAIMD_BIN", exe)
	if got, err := Build(t.TempDir()); err != nil || got != exe {
		t.Errorf("Build() with $CLAIMD_BIN=%s = %q, %v; want it, nil", exe, got, err)
	}

	notExe := filepath.Join(dir, "data")
	if err := os.WriteFile(notExe, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bin := range []string{notExe, dir, filepath.Join(dir, "missing")} {
		t.Setenv("CLAIMD_TESTPG_BIN", bin)
		_, err := BuildTool(t.TempDir(), serverModule+"/internal/testenv/cmd/testpg")
		if err == nil || !strings.Contains(err.Error(), "$CLAIMD_TESTPG_BIN="+bin) {
			t.Errorf("BuildTool(testpg) with $CLAIMD_TESTPG_BIN=%s error = %v; want one naming the variable", bin, err)
		}
	}
}
