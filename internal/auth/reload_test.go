package auth_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/auth"
)

// withHooksToken is the test file with billing-hooks' token replaced by tok.
func withHooksToken(tok string) string {
	return strings.Replace(testFile(), auth.HashToken(hooksToken), auth.HashToken(tok), 1)
}

// brokenFile is the test file with an unknown role on its last line.
var brokenFile = testFile() + "  broken:\n    tokens: [\"" + auth.HashToken("cl_x") + "\"]\n    namespaces: [x]\n    roles: [root]\n"

func (e *env) get(token string) error {
	_, err := pb.NewProviderServiceClient(e.conns).ListProviders(as(token), &pb.ListProvidersRequest{})
	return err
}

func TestReload(t *testing.T) {
	e := newEnv(t)
	e.conns = e.conn(t, nil)
	newTok := auth.NewToken()
	e.write(t, withHooksToken(newTok))
	if err := e.a.Reload(); err != nil {
		t.Fatalf("Reload() of a good file error = %v", err)
	}
	if err := e.get(hooksToken); codeOf(err) != codes.Unauthenticated {
		t.Errorf("the replaced token after Reload: error = %v, want Unauthenticated", err)
	}
	if err := e.get(newTok); err != nil {
		t.Errorf("the new token after Reload: error = %v, want nil", err)
	}
	if got := e.metric(t, "claimd_auth_reloads_total", "result", "success"); got != 1 {
		t.Errorf(`claimd_auth_reloads_total{result="success"} = %v, want 1`, got)
	}

	// A broken file keeps the good one in force and says where it broke.
	e.write(t, brokenFile)
	err := e.a.Reload()
	want := fmt.Sprintf("%s:%d: broken: role \"root\" is not one of", e.path, strings.Count(brokenFile, "\n")) // the last line
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Reload() of a broken file error = %v, want %q…", err, want)
	}
	if err := e.get(newTok); err != nil {
		t.Errorf("the token of the file in force after a failed Reload: error = %v, want nil", err)
	}
	if err := e.get(hooksToken); codeOf(err) != codes.Unauthenticated {
		t.Errorf("a token only the broken file lists: error = %v, want Unauthenticated", err)
	}
	if got := e.metric(t, "claimd_auth_reloads_total", "result", "failure"); got != 1 {
		t.Errorf(`claimd_auth_reloads_total{result="failure"} = %v, want 1`, got)
	}
	if got := e.metric(t, "claimd_auth_last_reload_successful", "", ""); got != 0 {
		t.Errorf("claimd_auth_last_reload_successful = %v, want 0", got)
	}
	if lines := e.logLines("auth file reload failed; the previous one stays in force"); len(lines) != 1 || !strings.Contains(lines[0], "root") {
		t.Errorf("reload failure log lines = %q, want one that says why", lines)
	}
	e.noSecrets(t)
}

// waitReload waits for the next reload whose outcome satisfies ok, and
// fails t after 10s. Reloads that do not satisfy ok (a second event of the
// same edit) are passed over.
func (e *env) waitReload(t *testing.T, what string, ok func(error) bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case err := <-e.reloaded:
			if ok(err) {
				return
			}
		case <-timeout:
			t.Fatalf("no reload: %s", what)
		}
	}
}

func succeeded(err error) bool { return err == nil }
func failed(err error) bool    { return err != nil }

func TestWatch(t *testing.T) {
	e := newEnv(t)
	e.conns = e.conn(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	hup := make(chan os.Signal, 1)
	done := make(chan struct{})
	go func() {
		e.a.Watch(ctx, hup)
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	// SIGHUP reloads, even a file that did not change. Once it has, the
	// watch on the directory is in place.
	hup <- syscall.SIGHUP
	e.waitReload(t, "after SIGHUP", succeeded)

	// An edit on disk is picked up without a signal.
	newTok := auth.NewToken()
	e.write(t, withHooksToken(newTok))
	e.waitReload(t, "after the file changed", succeeded)
	if err := e.get(newTok); err != nil {
		t.Errorf("the new token after the file changed: error = %v, want nil", err)
	}

	// A broken edit keeps the file in force.
	e.write(t, brokenFile)
	e.waitReload(t, "after a broken edit", failed)
	if err := e.get(newTok); err != nil {
		t.Errorf("the token of the file in force after a broken edit: error = %v, want nil", err)
	}

	// Fixing it puts the fix in force.
	e.write(t, testFile())
	e.waitReload(t, "after the fix", succeeded)
	if err := e.get(hooksToken); err != nil {
		t.Errorf("the token of the fixed file: error = %v, want nil", err)
	}
	if err := e.get(newTok); codeOf(err) != codes.Unauthenticated {
		t.Errorf("the token the fix removed: error = %v, want Unauthenticated", err)
	}
}
