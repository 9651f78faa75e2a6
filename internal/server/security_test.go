package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLooseFiles: the secret files may be read by their owner and their
// group (a Kubernetes secret volume is root:fsGroup 0440); any access by
// other users, or write access by the group, is named with its fix.
func TestLooseFiles(t *testing.T) {
	for _, tc := range []struct {
		mode os.FileMode
		want string // "" for no complaint
	}{
		{0o600, ""}, {0o400, ""}, {0o640, ""}, {0o440, ""}, {0o700, ""},
		{0o644, "has mode 0644: other users of the host may read it; chmod go-w,o-rwx"},
		{0o604, "other users of the host may read it"},
		{0o601, "other users of the host may execute it"},
		{0o660, "has mode 0660: its group may write it"},
		{0o666, "other users of the host may read, write it and its group may write it"},
	} {
		path := filepath.Join(t.TempDir(), "secret")
		if err := os.WriteFile(path, []byte("secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, tc.mode); err != nil { // past the umask
			t.Fatal(err)
		}
		got := strings.Join((&SecurityConfig{TLSKey: path, AuthFile: path, FastTierKeyFile: path}).looseFiles(), "\n")
		switch {
		case tc.want == "" && got != "":
			t.Errorf("looseFiles() of mode %04o = %q, want none", tc.mode, got)
		case tc.want != "" && (!strings.Contains(got, tc.want) || !strings.Contains(got, "--auth-file "+path) || !strings.Contains(got, "--tls-key "+path) || !strings.Contains(got, "--fast-tier-key-file "+path)):
			t.Errorf("looseFiles() of mode %04o = %q, want --auth-file, --tls-key and --fast-tier-key-file named, saying %q", tc.mode, got, tc.want)
		}
	}
}
