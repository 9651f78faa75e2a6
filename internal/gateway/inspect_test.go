package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// TestInspectOverREST: InspectService's routes work through the front door
// with the read role in the namespace (filters in the query, the key in
// the path, escaped), and a stranger, a reader of another namespace and a
// claim-only principal are refused on both before anything is read.
func TestInspectOverREST(t *testing.T) {
	e := newEnv(t, envOptions{})
	rest := e.callers(t, cred{token: hooksToken})[0]
	const event = "evt/inspect:1"
	acq, _ := ok[*pb.ClaimResponse](t, rest, "/idempotency.v1.ClaimService/Claim", &pb.ClaimRequest{Namespace: "billing", Provider: "stripe",
		Key: &pb.ClaimRequest_EventId{EventId: event}, Holder: "pod-a"})
	for _, to := range []pb.EventState{pb.EventState_EVENT_STATE_PROCESSING, pb.EventState_EVENT_STATE_SETTLED} {
		ok[*pb.TransitionResponse](t, rest, "/idempotency.v1.ClaimService/Transition", &pb.TransitionRequest{Namespace: "billing", Provider: "stripe",
			Key: acq.GetKey(), FencingToken: acq.GetFencingToken(), LeaseSecret: acq.GetLeaseSecret(), To: to})
	}

	list := "/v1/namespaces/billing/claims?provider=stripe&states=EVENT_STATE_SETTLED&states=EVENT_STATE_FAILED"
	audit := "/v1/namespaces/billing/providers/stripe/claims/" + escapeKey(event) + "/audit"
	get := func(c cred, path string) (int, []byte) {
		t.Helper()
		return e.do(t, e.httpClient(t, c), c, http.MethodGet, path, "", nil, nil)
	}

	status, raw := get(cred{token: readerToken}, list)
	var claims pb.ListClaimsResponse
	if status != http.StatusOK || protojson.Unmarshal(raw, &claims) != nil {
		t.Fatalf("GET %s as reader = %d %s, want 200 and a ListClaimsResponse", list, status, raw)
	}
	if len(claims.GetRecords()) != 1 || claims.GetRecords()[0].GetKey() != event || claims.GetRecords()[0].GetState() != pb.EventState_EVENT_STATE_SETTLED {
		t.Errorf("GET %s = %s, want the settled %q", list, raw, event)
	}
	status, raw = get(cred{token: readerToken}, strings.Replace(list, "SETTLED", "PROCESSING", 1))
	if status != http.StatusOK || strings.Contains(string(raw), "records") {
		t.Errorf("GET claims in PROCESSING or FAILED = %d %s, want 200 and no records", status, raw)
	}

	status, raw = get(cred{token: readerToken}, audit)
	var log pb.ListAuditResponse
	if status != http.StatusOK || protojson.Unmarshal(raw, &log) != nil {
		t.Fatalf("GET %s as reader = %d %s, want 200 and a ListAuditResponse", audit, status, raw)
	}
	var ops []string
	for _, en := range log.GetEntries() {
		ops = append(ops, en.GetOp().String()+" "+en.GetState().String()+" "+en.GetPrincipal()+" "+en.GetTransport())
	}
	want := []string{
		"AUDIT_OP_CLAIM EVENT_STATE_RECEIVED hooks http-rest",
		"AUDIT_OP_TRANSITION EVENT_STATE_PROCESSING hooks http-rest",
		"AUDIT_OP_TRANSITION EVENT_STATE_SETTLED hooks http-rest",
	}
	if strings.Join(ops, "\n") != strings.Join(want, "\n") {
		t.Errorf("GET %s entries =\n%s\nwant\n%s", audit, strings.Join(ops, "\n"), strings.Join(want, "\n"))
	}

	// A bad page token is a 400 naming it.
	status, raw = get(cred{token: readerToken}, list+"&pageToken=bm90IGEgY3Vyc29y")
	if o := outcomeOf(restError(t, raw), status); status != http.StatusBadRequest || o.code != codes.InvalidArgument ||
		len(o.fields) != 1 || o.fields[0] != "ListClaimsRequest.page_token" {
		t.Errorf("GET claims with a foreign page token = %d %+v, want 400 naming ListClaimsRequest.page_token", status, o)
	}

	for _, tc := range []struct {
		desc       string
		c          cred
		path       string
		wantStatus int
	}{
		{"a stranger", cred{}, "", http.StatusUnauthorized},
		{"an unknown token", cred{token: "cd_" + strings.Repeat("x", 40)}, "", http.StatusUnauthorized},
		{"a reader of billing in payments", cred{token: readerToken}, "payments", http.StatusForbidden},
		{"a claim-only principal", cred{token: writerToken}, "", http.StatusForbidden},
	} {
		for _, path := range []string{list, audit} {
			if tc.path != "" {
				path = strings.Replace(path, "/billing/", "/"+tc.path+"/", 1)
			}
			status, raw := get(tc.c, path)
			if status != tc.wantStatus {
				t.Errorf("GET %s as %s = %d %s, want %d", path, tc.desc, status, raw, tc.wantStatus)
			}
			var body map[string]any
			if json.Unmarshal(raw, &body) == nil && (body["records"] != nil || body["entries"] != nil) {
				t.Errorf("GET %s as %s answered data: %s", path, tc.desc, raw)
			}
		}
	}
}
