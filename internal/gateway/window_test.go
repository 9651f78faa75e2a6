package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
)

// TestWindowOverREST: POST /v1/claims takes ClaimRequest.window as a proto3
// JSON duration string: a week is the window the claim opens (its ttl
// says so); shorter than the provider's, or not a duration, is 400
// INVALID_ARGUMENT, and neither writes.
func TestWindowOverREST(t *testing.T) {
	e := newEnv(t, envOptions{})
	hooks := cred{token: hooksToken}
	hc := e.httpClient(t, hooks)
	claim := func(event, window string) (int, []byte) {
		body := `{"namespace":"billing","provider":"stripe","eventId":"` + event + `","window":` + window + `}`
		return e.do(t, hc, hooks, http.MethodPost, "/v1/claims", "application/json", nil, strings.NewReader(body))
	}

	status, raw := claim("evt_week", `"604800s"`)
	var resp struct{ Outcome, TTL, FirstSeenAt, WindowExpiresAt string }
	if err := json.Unmarshal(raw, &resp); status != 200 || err != nil {
		t.Fatalf(`POST /v1/claims with "window":"604800s" = %d %s`, status, raw)
	}
	if resp.Outcome != "OUTCOME_ACQUIRED" || resp.TTL != "604800s" {
		t.Errorf(`POST /v1/claims with "window":"604800s" = outcome %s, ttl %s; want OUTCOME_ACQUIRED, 604800s`, resp.Outcome, resp.TTL)
	}

	writes := e.store.Writes.Load()
	for _, tc := range []struct {
		desc, window string
		field        string // the BadRequest field named, "" when the JSON itself is refused
	}{
		{"an hour, shorter than stripe's 84h", `"3600s"`, "ClaimRequest.window"},
		{"over 400 days", `"34560001s"`, "ClaimRequest.window"},
		{"not a proto3 duration", `"a week"`, ""},
	} {
		status, raw := claim("evt_refused", tc.window)
		st := restError(t, raw)
		if status != 400 || st.Code() != codes.InvalidArgument {
			t.Errorf("POST /v1/claims with window %s (%s) = %d %s, want 400 INVALID_ARGUMENT", tc.window, tc.desc, status, raw)
			continue
		}
		var fields []string
		for _, d := range st.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok {
				for _, v := range br.GetFieldViolations() {
					fields = append(fields, v.GetField())
				}
			}
		}
		if tc.field != "" && (len(fields) != 1 || fields[0] != tc.field) {
			t.Errorf("POST /v1/claims with window %s (%s): field violations %v, want [%s]", tc.window, tc.desc, fields, tc.field)
		}
	}
	if w := e.store.Writes.Load(); w != writes {
		t.Errorf("refused windows reached the store %d times", w-writes)
	}
}
