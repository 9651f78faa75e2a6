// Package docs holds claimd's manual. Its test runs the manual's commands, so
// that every command a newcomer pastes works as written.
//
// TestConsoleBlocks reads the ```console blocks of README.md (its quick start),
// docs/getting-started.md (the grpcurl and curl walkthroughs) and
// docs/providers.md (claimd providers, key rules, out-of-order deliveries), in
// that order, and runs them in one bash shell against a fresh claimd, started
// as `make run` starts it (`claimd serve`, its default addresses
// 127.0.0.1:50051 and 127.0.0.1:8080) on a temporary --data-dir, in a
// directory that has the binary at bin/claimd as a checkout has after make
// run. The documented ports are used as written: when one stays busy the test
// fails and says so; it never moves to another port.
//
// The convention, for writers of console blocks:
//   - A line that starts with "$ " is a command; a command line that ends in
//     "\" continues on the next line. Commands of all blocks share one shell, so
//     a variable set in one (SECRET=$(… | jq -r .leaseSecret)) is there for the
//     next, as it is for a reader pasting them in order.
//   - The lines after a command, up to the next command or the block's end, are
//     its expected output, stdout and stderr together.
//   - "…" in an expected line stands for any text within that line: what
//     differs between runs (times, lease secrets, tokens). An expected line that
//     is only "…" stands for any number of lines, none included.
//   - Every other character must match, but trailing spaces, and spaces after
//     a ":" or a "," (which protojson adds or not at random per build), are
//     ignored.
//
// Each command has commandTimeout to answer. The test needs bash, curl, jq and
// grpcurl (scripts/test-deps.sh installs jq and grpcurl, the latter as `make
// grpcurl` does); a missing one fails the test, it is never skipped.
package docs

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/clients/go/claimdtest"
)

const (
	commandTimeout = 10 * time.Second
	portWait       = 5 * time.Second
	grpcAddr       = "127.0.0.1:50051"
	httpAddr       = "127.0.0.1:8080"
)

// documented lists the files whose console blocks run, in reading order.
var documented = []string{"../README.md", "getting-started.md", "providers.md"}

// command is one documented command with what the docs say it prints.
type command struct {
	where string   // file:line of the "$ " line
	text  string   // the command, continuation lines included
	want  []string // the expected output lines
}

func TestConsoleBlocks(t *testing.T) {
	var cmds []command
	for _, f := range documented {
		got := consoleCommands(t, f)
		if len(got) == 0 {
			t.Fatalf("%s has no console commands: the doc test would prove nothing", f)
		}
		cmds = append(cmds, got...)
	}

	path := toolPath(t)
	for _, addr := range []string{grpcAddr, httpAddr} {
		requireFree(t, addr)
	}
	// The shell works in a directory of its own that has bin/claimd, as a
	// reader's checkout has after make run.
	dir := t.TempDir()
	startClaimd(t, dir)

	sh := newShell(t, dir, path)
	for _, c := range cmds {
		out, err := sh.run(c.text, commandTimeout)
		if err != nil {
			t.Fatalf("%s: %v\n$ %s\n%s", c.where, err, c.text, strings.Join(out, "\n"))
		}
		if !matchLines(c.want, out) {
			t.Errorf("%s: the output differs from the docs\n$ %s\n--- documented\n%s\n--- got\n%s",
				c.where, c.text, strings.Join(c.want, "\n"), strings.Join(out, "\n"))
		}
	}
	t.Logf("ran %d documented commands from %s", len(cmds), strings.Join(documented, ", "))
}

// consoleCommands parses the ```console blocks of a markdown file.
func consoleCommands(t *testing.T, file string) []command {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var cmds []command
	in := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case !in && strings.TrimSpace(l) == "```console":
			in = true
		case in && strings.TrimSpace(l) == "```":
			in = false
		case in && strings.HasPrefix(l, "$ "):
			c := command{where: fmt.Sprintf("%s:%d", file, i+1), text: strings.TrimPrefix(l, "$ ")}
			for strings.HasSuffix(l, `\`) && i+1 < len(lines) {
				i++
				l = lines[i]
				c.text += "\n" + l
			}
			cmds = append(cmds, c)
		case in:
			if len(cmds) == 0 {
				t.Fatalf("%s:%d: output before any command in a console block", file, i+1)
			}
			last := &cmds[len(cmds)-1]
			last.want = append(last.want, strings.TrimRight(l, " \t"))
		}
	}
	if in {
		t.Fatalf("%s: a console block is not closed", file)
	}
	return cmds
}

// toolPath returns PATH with the pinned tools' directory first (as the
// Makefile exports it) and fails when a tool the docs use is missing.
func toolPath(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatal(err)
		}
		cache = filepath.Join(home, ".cache")
	}
	path := filepath.Join(cache, "claimd-tools", "bin") + string(os.PathListSeparator) + os.Getenv("PATH")
	for _, tool := range []string{"bash", "curl", "jq", "grpcurl"} {
		if _, err := lookPath(tool, path); err != nil {
			t.Fatalf("%s is missing: the documented commands need it (scripts/test-deps.sh installs jq; `make grpcurl` installs grpcurl)", tool)
		}
	}
	return path
}

func lookPath(name, path string) (string, error) {
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// requireFree fails the test when addr stays taken for portWait: a test of
// another package may hold it for a moment, a `make run` holds it for good.
func requireFree(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(portWait)
	for {
		l, err := net.Listen("tcp", addr)
		if err == nil {
			l.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is busy (%v): the docs use claimd's default ports; stop what listens there (a `make run`?) and run the test again", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startClaimd puts claimd at dir/bin/claimd, where `make build` puts it for
// commands that run ./bin/claimd (claimdtest.Build: the binary make test
// built, $CLAIMD_BIN, or one compiled with the image's flags), and starts
// it as `make run` does, on a temporary data directory; it returns when
// /readyz answers.
func startClaimd(t *testing.T, dir string) {
	t.Helper()
	bin := filepath.Join(dir, "bin", "claimd")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	built, err := claimdtest.Build(filepath.Dir(bin))
	if err != nil {
		t.Fatal(err)
	}
	if built != bin {
		if err := os.Symlink(built, bin); err != nil {
			t.Fatal(err)
		}
	}

	var logs bytes.Buffer
	srv := exec.Command(bin, "serve", "--data-dir", filepath.Join(dir, "data"))
	srv.Dir = dir
	srv.Stdout, srv.Stderr = &logs, &logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	t.Cleanup(func() {
		_ = srv.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("claimd's log:\n%s", logs.String())
		}
	})

	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("claimd exited at start: %v\n%s", err, logs.String())
		default:
		}
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("claimd is not ready after 20s (last: %v)\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// shell is one bash process; each command's output ends at a marker line.
type shell struct {
	stdin io.Writer
	out   chan string // lines of stdout and stderr
	n     int
}

func newShell(t *testing.T, dir, path string) *shell {
	t.Helper()
	cmd := exec.Command("bash", "--noprofile", "--norc")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+path, "LC_ALL=C.UTF-8")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		r.Close()
	})
	sh := &shell{stdin: stdin, out: make(chan string, 1024)}
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			sh.out <- sc.Text()
		}
		close(sh.out)
	}()
	return sh
}

// run sends one command and returns its output lines. The marker is printed
// after a newline, so output without a final newline still ends its line; the
// empty line that adds after output that had one is dropped.
func (s *shell) run(text string, timeout time.Duration) ([]string, error) {
	s.n++
	marker := fmt.Sprintf("__claimd_doc_test_%d__", s.n)
	if _, err := fmt.Fprintf(s.stdin, "%s\nprintf '\\n%s\\n'\n", text, marker); err != nil {
		return nil, err
	}
	var lines []string
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-s.out:
			if !ok {
				return lines, fmt.Errorf("the shell exited")
			}
			if l != marker {
				lines = append(lines, strings.TrimRight(l, " \t"))
				continue
			}
			if n := len(lines); n > 0 && lines[n-1] == "" {
				lines = lines[:n-1]
			}
			return lines, nil
		case <-timer.C:
			return lines, fmt.Errorf("no answer within %v", timeout)
		}
	}
}

// matchLines reports whether got matches want under the "…" convention.
func matchLines(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if strings.TrimSpace(want[0]) == "…" {
		for skip := 0; skip <= len(got); skip++ {
			if matchLines(want[1:], got[skip:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && lineRegexp(want[0]).MatchString(got[0]) && matchLines(want[1:], got[1:])
}

// separatorSpaces are the spaces after a ":" or a ",": protojson, which
// writes claimd's HTTP answers, adds one or not at random per build (so that
// nobody compares its output byte for byte), and the docs may show either.
var separatorSpaces = regexp.MustCompile(`([:,]) +`)

func lineRegexp(want string) *regexp.Regexp {
	parts := strings.Split(want, "…")
	for i, p := range parts {
		p = regexp.QuoteMeta(separatorSpaces.ReplaceAllString(p, "$1"))
		p = strings.ReplaceAll(p, ":", ": *")
		parts[i] = strings.ReplaceAll(p, ",", ", *")
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
}

// TestMatchLines: the convention, on the lines protojson may write either way.
func TestMatchLines(t *testing.T) {
	tests := []struct {
		want, got string
		match     bool
	}{
		{`{"code":9, "message":"a: b"}`, `{"code":9,"message":"a: b"}`, true},
		{`{"code":9,"message":"a:b"}`, `{"code": 9,  "message": "a: b"}`, true},
		{`{"code":9, "secret":"…"}`, `{"code":9,"secret":"x+y=="}`, true},
		{`{"code":9, "message":"a"}`, `{"code":3, "message":"a"}`, false},
		{`{"code":9}`, `{"code" :9}`, false},
	}
	for _, tc := range tests {
		if got := matchLines([]string{tc.want}, []string{tc.got}); got != tc.match {
			t.Errorf("matchLines(%q, %q) = %v, want %v", tc.want, tc.got, got, tc.match)
		}
	}
}
