package auth_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/auth"
	"github.com/claimd/claimd/internal/filewatch"
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

// reloads returns the outcomes of the reloads since the last call.
func (e *env) reloads() []error {
	var out []error
	for {
		select {
		case err := <-e.reloaded:
			out = append(out, err)
		default:
			return out
		}
	}
}

// TestReloadWhenChanged: a change on disk is seen, without a signal, by
// the first call after the check interval, and decides that call; a broken
// edit is reported once however often it is checked; a file gone
// mid-replace leaves the one in force.
func TestReloadWhenChanged(t *testing.T) {
	e := newEnv(t)
	e.conns = e.conn(t, nil)
	newTok := auth.NewToken()
	e.write(t, withHooksToken(newTok))
	if err := e.get(newTok); codeOf(err) != codes.Unauthenticated {
		t.Fatalf("the new token within the check interval: error = %v, want Unauthenticated (not looked at yet)", err)
	}
	e.clk.Advance(filewatch.DefaultInterval)
	if err := e.get(newTok); err != nil {
		t.Fatalf("the new token on the first call after the interval: error = %v, want nil", err)
	}
	if got := e.reloads(); len(got) != 1 || got[0] != nil {
		t.Fatalf("reloads after the change = %v, want one success", got)
	}

	// A broken edit keeps the file in force, reported once.
	e.write(t, brokenFile)
	for range 3 {
		e.clk.Advance(filewatch.DefaultInterval)
		if err := e.get(newTok); err != nil {
			t.Fatalf("the token of the file in force after a broken edit: error = %v, want nil", err)
		}
	}
	if got := e.reloads(); len(got) != 1 || got[0] == nil {
		t.Fatalf("reloads after a broken edit checked 3 times = %v, want one failure", got)
	}
	if got := e.metric(t, "claimd_auth_reloads_total", "result", "failure"); got != 1 {
		t.Errorf(`claimd_auth_reloads_total{result="failure"} = %v, want 1`, got)
	}

	// Gone mid-replace: the file in force stays, and a warning says so.
	if err := os.Remove(e.path); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(filewatch.DefaultInterval)
	if err := e.get(newTok); err != nil {
		t.Errorf("the token of the file in force while the file is gone: error = %v, want nil", err)
	}
	if lines := e.logLines("auth file is gone; the one loaded stays in force"); len(lines) != 1 {
		t.Errorf("log lines while the file is gone = %q, want one warning", lines)
	}

	// Its fixed return puts the fix in force.
	e.write(t, testFile())
	e.clk.Advance(filewatch.DefaultInterval)
	if err := e.get(hooksToken); err != nil {
		t.Errorf("the token of the fixed file: error = %v, want nil", err)
	}
	if err := e.get(newTok); codeOf(err) != codes.Unauthenticated {
		t.Errorf("the token the fix removed: error = %v, want Unauthenticated", err)
	}
	if got := e.reloads(); len(got) != 1 || got[0] != nil {
		t.Errorf("reloads after the fix = %v, want one success", got)
	}
}
