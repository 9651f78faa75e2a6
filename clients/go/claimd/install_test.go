package claimd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/claimd/claimd/clients/go/claimdtest"
)

// TestInstallOutside installs the client as README.md's Install section says,
// in a new module outside the repository: it runs that section's go commands
// as written (CLAIMD set to this checkout) for a main.go that is README.md's
// first Go example, and builds it. The build must pull in no module of
// claimd's but the client and the generated API: the client's module does
// not require the server's.
func TestInstallOutside(t *testing.T) {
	repo, err := claimdtest.Source()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(repo, "clients", "go", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/hook\n\ngo 1.26\n")
	write("main.go", outsideMain(t, fencedBlock(t, string(readme), "", "```go")))
	// The hashes claimd's modules already hold, so that go mod tidy need not
	// ask the checksum database and the test runs offline from the module
	// cache; sum.golang.org answers the same for a user who is online.
	var sums []byte
	for _, f := range []string{"clients/go/go.sum", "gen/go.sum"} {
		b, err := os.ReadFile(filepath.Join(repo, f))
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, b...)
	}
	write("go.sum", string(sums))

	// Built as the tests' other non-race builds are (claimdtest.BuildEnv):
	// with go build's defaults this test compiled gRPC and protobuf once
	// more on a cold cache, about 50 s of CPU on two cores. The flags do not
	// change which modules the commands resolve, which is what it checks.
	env := claimdtest.BuildEnv(append(os.Environ(), "GOWORK=off", "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"), "CLAIMD="+repo))
	var ran []string
	for _, line := range shellLines(fencedBlock(t, string(readme), "## Install", "```sh")) {
		args := strings.Fields(os.Expand(strings.ReplaceAll(line, `"`, ""), func(v string) string {
			if v == "CLAIMD" {
				return repo
			}
			return "$" + v
		}))
		if len(args) == 0 || args[0] != "go" {
			continue // git clone and CLAIMD=: this checkout is the clone
		}
		cmd := exec.Command("go", args[1:]...)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		ran = append(ran, strings.Join(args[:min(3, len(args))], " "))
	}
	if want := []string{"go mod edit", "go mod tidy", "go build ./..."}; strings.Join(ran, "|") != strings.Join(want, "|") {
		t.Fatalf("README.md's Install block ran %q, want %q", ran, want)
	}

	list := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", ".")
	list.Dir, list.Env = dir, env
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, m := range strings.Fields(string(out)) {
		if strings.HasPrefix(m, "github.com/claimd/") && m != "github.com/claimd/claimd/clients/go" && m != "github.com/claimd/claimd/gen" {
			t.Errorf("the outside module's build uses %s; want only the client's and the API's modules of claimd's", m)
		}
	}
}

// fencedBlock returns the body of the first fence opening with fence in md
// after the line heading (from the top when heading is "").
func fencedBlock(t *testing.T, md, heading, fence string) string {
	t.Helper()
	if heading != "" {
		i := strings.Index(md, "\n"+heading+"\n")
		if i < 0 {
			t.Fatalf("README.md has no %q section", heading)
		}
		md = md[i:]
	}
	i := strings.Index(md, "\n"+fence+"\n")
	if i < 0 {
		t.Fatalf("README.md has no %s block after %q", fence, heading)
	}
	body := md[i+len(fence)+2:]
	j := strings.Index(body, "\n```")
	if j < 0 {
		t.Fatalf("README.md's %s block after %q is not closed", fence, heading)
	}
	return body[:j+1]
}

// shellLines joins a shell block's continued lines.
func shellLines(block string) []string {
	return strings.Split(strings.ReplaceAll(block, "\\\n", " "), "\n")
}

// outsideMain wraps README.md's example, a fragment of a main function, into
// a program: what it leaves to the reader (ctx, charge) is declared here.
func outsideMain(t *testing.T, example string) string {
	t.Helper()
	if !strings.Contains(example, "claimd.Dial(") {
		t.Fatalf("README.md's first Go example does not call claimd.Dial:\n%s", example)
	}
	return `package main

import (
	"context"
	"log"
	"net/http"

	"github.com/claimd/claimd/clients/go/claimd"
)

// charge stands for the handler's side effect.
func charge(ctx context.Context, body []byte) ([]byte, error) { return nil, nil }

func main() {
	ctx := context.Background()
` + example + `	log.Fatal(http.ListenAndServe("127.0.0.1:8091", nil))
}
`
}
