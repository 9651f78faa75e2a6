package gateway_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/claimd/claimd/internal/gateway"
)

// answer is an HTTP answer of the API.
type answer struct {
	status int
	header http.Header
	raw    []byte
	o      outcome
}

// send makes one HTTP call with the headers given ("Host" sets the
// request's Host) and reads its error as REST or Connect writes it.
func (e *env) send(t *testing.T, hc *http.Client, verb, path string, h http.Header, body []byte) answer {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	r, err := http.NewRequest(verb, e.httpURL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		if k == "Host" {
			r.Host = v[0]
			continue
		}
		r.Header[k] = v
	}
	r.Header.Set("Authorization", "Bearer "+hooksToken)
	resp, err := hc.Do(r)
	if err != nil {
		t.Fatalf("%s %s: %v", verb, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{status: resp.StatusCode, header: resp.Header, raw: raw, o: outcome{code: codes.OK, httpStatus: resp.StatusCode}}
	if resp.StatusCode != http.StatusOK {
		if strings.HasPrefix(path, "/idempotency.") {
			a.o = outcomeOf(connectError(t, raw), resp.StatusCode)
		} else {
			a.o = outcomeOf(restError(t, raw), resp.StatusCode)
		}
	}
	return a
}

const connectClaim = "/idempotency.v1.ClaimService/Claim"

func claimJSON(event string) []byte {
	return []byte(`{"namespace":"billing","provider":"stripe","eventId":"` + event + `","holder":"front"}`)
}

func jsonHeader(kv ...string) http.Header {
	h := http.Header{"Content-Type": {"application/json"}}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = []string{kv[i+1]}
	}
	return h
}

// frontCase is one request to the front door and how it must end.
type frontCase struct {
	desc       string
	verb, path string
	header     http.Header
	body       []byte
	wantStatus int
	wantCode   codes.Code
	wantReason string
	wantText   string // in the error message
}

func (e *env) runFront(t *testing.T, cases []frontCase) {
	t.Helper()
	hc := e.httpClient(t, cred{})
	for _, c := range cases {
		writes := e.store.Writes.Load()
		a := e.send(t, hc, c.verb, c.path, c.header, c.body)
		if a.status != c.wantStatus || a.o.code != c.wantCode || a.o.reason != c.wantReason || !strings.Contains(string(a.raw), c.wantText) {
			t.Errorf("%s: %s %s = %d %s %s %.300s, want %d %s %s %q", c.desc, c.verb, c.path, a.status, a.o.code, a.o.reason, a.raw,
				c.wantStatus, c.wantCode, c.wantReason, c.wantText)
		}
		if c.wantStatus != http.StatusOK && e.store.Writes.Load() != writes {
			t.Errorf("%s: refused, yet it wrote to the store", c.desc)
		}
	}
}

// TestHostOriginAndContentType: the API answers only the hosts it is
// configured for (the DNS-rebinding Host of the issue is refused 421),
// refuses a foreign Origin 403 and a write without a JSON or protobuf
// content type 415, each with its reason and before anything is written;
// the usual requests (the URL's own host, localhost, a JSON body with a
// charset, an Origin of an allowed host) pass.
func TestHostOriginAndContentType(t *testing.T) {
	e := newEnv(t, envOptions{})
	const provider = "/v1/providers/stripe"
	e.runFront(t, []frontCase{
		{desc: "the URL's own host", verb: "GET", path: provider, wantStatus: 200},
		{desc: "localhost with a port", verb: "GET", path: provider, header: http.Header{"Host": {"LOCALHOST:8080"}}, wantStatus: 200},
		{desc: "IPv6 loopback", verb: "GET", path: provider, header: http.Header{"Host": {"[::1]:8080"}}, wantStatus: 200},
		{desc: "a claim as curl --json sends it", verb: "POST", path: "/v1/claims", header: jsonHeader("Host", "127.0.0.1:8080"), body: claimJSON("evt_curl"), wantStatus: 200},
		{desc: "DNS rebinding: a claim with a foreign Host", verb: "POST", path: "/v1/claims", header: jsonHeader("Host", "rebind.evil.example"), body: claimJSON("evt_rebind"),
			wantStatus: 421, wantCode: codes.PermissionDenied, wantReason: gateway.ReasonHostNotAllowed, wantText: "rebind.evil.example"},
		{desc: "a foreign Host over Connect", verb: "POST", path: connectClaim, header: jsonHeader("Host", "rebind.evil.example:8080", "Connect-Protocol-Version", "1"), body: claimJSON("evt_rebind"),
			wantStatus: 421, wantCode: codes.PermissionDenied, wantReason: gateway.ReasonHostNotAllowed},
		{desc: "a foreign Host on a read", verb: "GET", path: provider, header: http.Header{"Host": {"169.254.169.254"}},
			wantStatus: 421, wantCode: codes.PermissionDenied, wantReason: gateway.ReasonHostNotAllowed},
		{desc: "a foreign Origin", verb: "POST", path: "/v1/claims", header: jsonHeader("Origin", "https://evil.example"), body: claimJSON("evt_origin"),
			wantStatus: 403, wantCode: codes.PermissionDenied, wantReason: gateway.ReasonOriginNotAllowed, wantText: "evil.example"},
		{desc: "Origin null (a sandboxed page)", verb: "POST", path: "/v1/claims", header: jsonHeader("Origin", "null"), body: claimJSON("evt_null"),
			wantStatus: 403, wantCode: codes.PermissionDenied, wantReason: gateway.ReasonOriginNotAllowed},
		{desc: "a foreign Origin over Connect", verb: "POST", path: connectClaim, header: jsonHeader("Origin", "http://evil.example", "Connect-Protocol-Version", "1"), body: claimJSON("evt_origin"),
			wantStatus: 403, wantCode: codes.PermissionDenied, wantReason: gateway.ReasonOriginNotAllowed},
		{desc: "an Origin of an allowed host", verb: "POST", path: "/v1/claims", header: jsonHeader("Origin", "http://localhost:3000"), body: claimJSON("evt_local_origin"), wantStatus: 200},
		{desc: "a typeless body", verb: "POST", path: "/v1/claims", body: claimJSON("evt_typeless"),
			wantStatus: 415, wantCode: codes.InvalidArgument, wantReason: gateway.ReasonContentTypeUnsupported},
		{desc: "text/plain (a page's simple request)", verb: "POST", path: "/v1/claims", header: http.Header{"Content-Type": {"text/plain"}}, body: claimJSON("evt_text"),
			wantStatus: 415, wantCode: codes.InvalidArgument, wantReason: gateway.ReasonContentTypeUnsupported, wantText: "text/plain"},
		{desc: "a form", verb: "POST", path: "/v1/claims", header: http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, body: claimJSON("evt_form"),
			wantStatus: 415, wantCode: codes.InvalidArgument, wantReason: gateway.ReasonContentTypeUnsupported},
		{desc: "JSON with a charset", verb: "POST", path: "/v1/claims", header: http.Header{"Content-Type": {"application/json; charset=utf-8"}}, body: claimJSON("evt_charset"), wantStatus: 200},
	})
}

// TestPathFieldsWin: on every REST route of the gateway's route table, a
// query parameter that names a field the path sets (as proto or JSON
// spells it) is refused 400 INVALID_ARGUMENT naming both, and on a route
// whose body is the whole message any query parameter is; nothing is
// written. The case (payouts in the path, billing in the query)
// is among them.
func TestPathFieldsWin(t *testing.T) {
	e := newEnv(t, envOptions{})
	routes, err := gateway.Routes(e.srv)
	if err != nil {
		t.Fatal(err)
	}
	var cases []frontCase
	for _, r := range routes {
		path := r.Pattern
		for _, v := range r.Vars {
			path = strings.Replace(path, "{"+v+"}", "payouts", 1)
		}
		var hdr http.Header
		var body []byte
		if r.Verb != http.MethodGet {
			hdr, body = jsonHeader(), []byte(`{"namespace":"billing","provider":"stripe"}`)
		}
		for _, v := range r.Vars {
			for _, key := range []string{v, camel(v)} {
				cases = append(cases, frontCase{desc: fmt.Sprintf("%s %s with ?%s", r.Verb, r.Pattern, key), verb: r.Verb, path: path + "?" + key + "=billing", header: hdr, body: body,
					wantStatus: 400, wantCode: codes.InvalidArgument, wantReason: "INVALID_ARGUMENT", wantText: "the path sets"})
			}
		}
		if r.Body == "*" {
			cases = append(cases, frontCase{desc: fmt.Sprintf("%s %s with a query", r.Verb, r.Pattern), verb: r.Verb, path: path + "?holder=other", header: hdr, body: body,
				wantStatus: 400, wantCode: codes.InvalidArgument, wantReason: "INVALID_ARGUMENT", wantText: "none from the query"})
		}
	}
	if len(cases) < len(routes) {
		t.Fatalf("%d cases for %d routes: the route table lost its path fields", len(cases), len(routes))
	}
	// The path alone still serves: the record is simply not there.
	cases = append(cases, frontCase{desc: "Get without a query", verb: "GET", path: "/v1/namespaces/billing/providers/stripe/claims/zzz",
		wantStatus: 404, wantCode: codes.NotFound, wantReason: "RECORD_NOT_FOUND"})
	e.runFront(t, cases)

	// A body never overrides the path: a Release whose body names another
	// key releases the path's key.
	hc := e.httpClient(t, cred{})
	a := e.send(t, hc, "POST", "/v1/claims", jsonHeader(), claimJSON("evt_pathwins"))
	var acq struct{ Key, FencingToken, LeaseSecret string }
	if err := json.Unmarshal(a.raw, &acq); a.status != 200 || err != nil {
		t.Fatalf("Claim = %d %s", a.status, a.raw)
	}
	body := fmt.Sprintf(`{"namespace":"billing","provider":"stripe","key":"evt_elsewhere","fencingToken":%q,"leaseSecret":%q}`, acq.FencingToken, acq.LeaseSecret)
	if a := e.send(t, hc, "POST", "/v1/claims/"+acq.Key+":release", jsonHeader(), []byte(body)); a.status != 200 {
		t.Errorf("Release of %s with key evt_elsewhere in the body = %d %s, want 200: the path's key", acq.Key, a.status, a.raw)
	}
}

func camel(s string) string {
	parts := strings.Split(s, "_")
	for i := 1; i < len(parts); i++ {
		parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
	}
	return strings.Join(parts, "")
}

// TestClientErrorsAre4xx: the client errors that were answered
// 5xx are each a precise 400 INVALID_ARGUMENT naming what is wrong, and
// write nothing.
func TestClientErrorsAre4xx(t *testing.T) {
	e := newEnv(t, envOptions{})
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(claimJSON("evt_gzip"))
	zw.Close()
	e.runFront(t, []frontCase{
		{desc: "an empty body", verb: "POST", path: "/v1/claims", header: jsonHeader(), body: []byte{},
			wantStatus: 400, wantCode: codes.InvalidArgument, wantReason: "INVALID_ARGUMENT", wantText: "the request body is empty"},
		{desc: "an empty body on a verb route", verb: "POST", path: "/v1/claims/k:release", header: jsonHeader(), body: []byte{},
			wantStatus: 400, wantCode: codes.InvalidArgument, wantReason: "INVALID_ARGUMENT", wantText: "the request body is empty"},
		{desc: "an empty body over Connect JSON", verb: "POST", path: connectClaim, header: jsonHeader("Connect-Protocol-Version", "1"), body: []byte{},
			wantStatus: 400, wantCode: codes.InvalidArgument, wantReason: "INVALID_ARGUMENT", wantText: "the request body is empty"},
		{desc: "an empty body over Connect protobuf is the empty message", verb: "POST", path: "/idempotency.v1.ProviderService/ListProviders",
			header: http.Header{"Content-Type": {"application/proto"}, "Connect-Protocol-Version": {"1"}}, body: []byte{}, wantStatus: 200},
		{desc: "an overlong UTF-8 '/' in a path", verb: "GET", path: "/v1/namespaces/billing/providers/stripe/claims/%C0%AF",
			wantStatus: 400, wantCode: codes.InvalidArgument, wantReason: "INVALID_ARGUMENT", wantText: "not UTF-8"},
		{desc: "invalid UTF-8 in a key of a write", verb: "POST", path: "/v1/claims/%FF:release", header: jsonHeader(), body: []byte(`{}`),
			wantStatus: 400, wantCode: codes.InvalidArgument, wantReason: "INVALID_ARGUMENT", wantText: "not UTF-8"},
		{desc: "invalid UTF-8 in a query", verb: "GET", path: "/v1/providers?x=%C0%AF",
			wantStatus: 400, wantCode: codes.InvalidArgument, wantReason: "INVALID_ARGUMENT", wantText: "not UTF-8"},
		{desc: "gzip Content-Encoding over a plain body", verb: "POST", path: "/v1/claims", header: jsonHeader("Content-Encoding", "gzip"), body: claimJSON("evt_notgzip"),
			wantStatus: 400, wantCode: codes.InvalidArgument, wantReason: "INVALID_ARGUMENT", wantText: "not valid gzip"},
		{desc: "gzip Content-Encoding over a plain body, Connect", verb: "POST", path: connectClaim, header: jsonHeader("Content-Encoding", "gzip", "Connect-Protocol-Version", "1"), body: claimJSON("evt_notgzip"),
			wantStatus: 400, wantCode: codes.InvalidArgument, wantReason: "INVALID_ARGUMENT", wantText: "not valid gzip"},
		{desc: "a real gzip body passes", verb: "POST", path: "/v1/claims", header: jsonHeader("Content-Encoding", "gzip"), body: gz.Bytes(), wantStatus: 200},
	})
}

// TestRetryAfter: a rate-limited call over REST and Connect is answered
// 429 with Retry-After in whole seconds (the trickle principal gets one
// call per 1000s).
func TestRetryAfter(t *testing.T) {
	e := newEnv(t, envOptions{})
	hc := e.httpClient(t, cred{})
	get := func(path string, h http.Header) *http.Response {
		r, err := http.NewRequest(http.MethodPost, e.httpURL+path, strings.NewReader(`{"name":"stripe"}`))
		if err != nil {
			t.Fatal(err)
		}
		r.Header = h
		r.Header.Set("Authorization", "Bearer "+trickleToken)
		r.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	const method = "/idempotency.v1.ProviderService/GetProvider"
	if resp := get(method, http.Header{"Connect-Protocol-Version": {"1"}}); resp.StatusCode != 200 {
		t.Fatalf("first call = %d, want 200 (burst 1)", resp.StatusCode)
	}
	for _, c := range []struct {
		desc string
		h    http.Header
		path string
	}{
		{"connect", http.Header{"Connect-Protocol-Version": {"1"}}, method},
	} {
		resp := get(c.path, c.h)
		secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != 429 || err != nil || secs < 1 || secs > 1000 {
			t.Errorf("%s: rate-limited call = %d Retry-After %q, want 429 with 1..1000 seconds", c.desc, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	// REST: GET /v1/providers/stripe.
	r, err := http.NewRequest(http.MethodGet, e.httpURL+"/v1/providers/stripe", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer "+trickleToken)
	resp, err := hc.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); resp.StatusCode != 429 || err != nil || secs < 1 || secs > 1000 {
		t.Errorf("rest: rate-limited call = %d Retry-After %q, want 429 with 1..1000 seconds", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}
