package service

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	_ "modernc.org/sqlite" // to read the embedded tier's audit log

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/auth"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/gateway"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/memory"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/sqlite"
	"github.com/claimd/claimd/internal/tiers/twotier"
)

// auditActor is what an audit row says about a call: its operation, who
// asked and how.
type auditActor struct {
	Op, Principal, Transport string
}

// auditedTier is a production pairing with a way to read its durable
// tier's audit log.
type auditedTier struct {
	store tiers.Store
	// rows returns the audit rows of key k in the order they were written.
	rows func(t *testing.T, k string) []auditActor
}

// auditedProduction is Redis in front of PostgreSQL, both real servers.
func auditedProduction(t *testing.T) auditedTier {
	t.Helper()
	ctx := context.Background()
	url := testenv.Postgres(t, postgres.Migrate)
	s := productionOn(t, url)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	table := pgx.Identifier{postgres.DefaultSchema, "audit_log"}.Sanitize()
	return auditedTier{store: s, rows: func(t *testing.T, k string) []auditActor {
		t.Helper()
		rows, _ := conn.Query(ctx, `SELECT op, principal, transport FROM `+table+` WHERE key = $1 ORDER BY id`, k)
		got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[auditActor])
		if err != nil {
			t.Fatalf("reading audit_log: %v", err)
		}
		return got
	}}
}

// auditedEmbedded is the memory tier in front of SQLite.
func auditedEmbedded(t *testing.T) auditedTier {
	t.Helper()
	path := filepath.Join(t.TempDir(), "claimd.db")
	lite, err := sqlite.New(context.Background(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	s := twotier.New(memory.New(memory.Config{}), lite, twotier.Config{})
	t.Cleanup(func() { s.Close() })
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return auditedTier{store: s, rows: func(t *testing.T, k string) []auditActor {
		t.Helper()
		rows, err := db.Query(`SELECT op, principal, transport FROM audit_log WHERE key = ? ORDER BY id`, k)
		if err != nil {
			t.Fatalf("reading audit_log: %v", err)
		}
		defer rows.Close()
		var got []auditActor
		for rows.Next() {
			var a auditActor
			if err := rows.Scan(&a.Op, &a.Principal, &a.Transport); err != nil {
				t.Fatal(err)
			}
			got = append(got, a)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return got
	}}
}

// attributedServer is claimd's gRPC server with the service over tier,
// behind the auth interceptors when authFile is set, on a gRPC listener
// and, through the gateway wrapped in auth.MarkTransport, on an HTTP one.
type attributedServer struct {
	grpcConn *grpc.ClientConn
	httpURL  string
	logs     *testenv.LogBuffer
}

func newAttributedServer(t *testing.T, tier auditedTier, authFile string) *attributedServer {
	t.Helper()
	a := &attributedServer{logs: &testenv.LogBuffer{}}
	log := slog.New(slog.NewJSONHandler(a.logs, nil))
	reg, err := horizon.Default()
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if authFile != "" {
		path := filepath.Join(t.TempDir(), "auth.yaml")
		if err := os.WriteFile(path, []byte(authFile), 0o600); err != nil {
			t.Fatal(err)
		}
		authn, err := auth.Load(path, auth.Options{Registerer: prometheus.NewRegistry(), Logger: log, Clock: clock.Real{}})
		if err != nil {
			t.Fatal(err)
		}
		opts = authn.ServerOptions()
	}
	srv := grpc.NewServer(opts...)
	New(Config{Store: tier.store, Registry: reg, Clock: clock.NewFake(time.Now()), Logger: log}).Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	if a.grpcConn, err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.grpcConn.Close() })
	gw, err := gateway.New(srv, gateway.Config{MaxRequestBytes: 64 << 10, AllowedHosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(auth.MarkTransport(gw))
	t.Cleanup(hs.Close)
	a.httpURL = hs.URL
	return a
}

// caller makes the four writes of one transport. Each returns the
// response into resp.
type caller func(t *testing.T, a *attributedServer, token, method string, req, resp proto.Message)

// grpcCaller calls on the gRPC listener.
func grpcCaller(t *testing.T, a *attributedServer, token, method string, req, resp proto.Message) {
	t.Helper()
	ctx := context.Background()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	if err := a.grpcConn.Invoke(ctx, "/idempotency.v1.ClaimService/"+method, req, resp); err != nil {
		t.Fatalf("gRPC %s error = %v", method, err)
	}
}

// restCaller posts to the REST routes of the proto's google.api.http
// annotations.
func restCaller(t *testing.T, a *attributedServer, token, method string, req, resp proto.Message) {
	t.Helper()
	path := "/v1/claims"
	if method != "Claim" {
		key := req.ProtoReflect().Get(req.ProtoReflect().Descriptor().Fields().ByName("key")).String()
		path += "/" + url.PathEscape(key) + ":" + strings.ToLower(method)
	}
	httpCall(t, a.httpURL+path, token, nil, method, req, resp)
}

// connectCaller speaks the Connect protocol with JSON.
func connectCaller(t *testing.T, a *attributedServer, token, method string, req, resp proto.Message) {
	t.Helper()
	httpCall(t, a.httpURL+"/idempotency.v1.ClaimService/"+method, token, http.Header{"Connect-Protocol-Version": {"1"}}, method, req, resp)
}

func httpCall(t *testing.T, target, token string, header http.Header, method string, req, resp proto.Message) {
	t.Helper()
	body, err := protojson.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	hr, err := http.NewRequest(http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		hr.Header[k] = v
	}
	hr.Header.Set("Content-Type", "application/json")
	if token != "" {
		hr.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("POST %s (%s) = %d %s", target, method, res.StatusCode, out)
	}
	if err := protojson.Unmarshal(out, resp); err != nil {
		t.Fatalf("POST %s (%s): decoding %s: %v", target, method, out, err)
	}
}

// writeFour claims key k and, as its owner, moves it to PROCESSING,
// renews it and releases it: each of the four writes once.
func writeFour(t *testing.T, a *attributedServer, call caller, token, k string) {
	t.Helper()
	var c pb.ClaimResponse
	call(t, a, token, "Claim", &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: k}, Holder: "pod-a"}, &c)
	if c.GetOutcome() != pb.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("Claim(%q) outcome = %v, want ACQUIRED", k, c.GetOutcome())
	}
	ns, prov, key := "billing", "stripe", c.GetKey()
	call(t, a, token, "Transition", &pb.TransitionRequest{Namespace: ns, Provider: prov, Key: key, FencingToken: c.GetFencingToken(),
		LeaseSecret: c.GetLeaseSecret(), To: pb.EventState_EVENT_STATE_PROCESSING}, &pb.TransitionResponse{})
	call(t, a, token, "Renew", &pb.RenewRequest{Namespace: ns, Provider: prov, Key: key, FencingToken: c.GetFencingToken(),
		LeaseSecret: c.GetLeaseSecret()}, &pb.RenewResponse{})
	call(t, a, token, "Release", &pb.ReleaseRequest{Namespace: ns, Provider: prov, Key: key, FencingToken: c.GetFencingToken(),
		LeaseSecret: c.GetLeaseSecret()}, &pb.ReleaseResponse{})
}

// loggedActors returns the method, principal and transport of each log
// line about key k.
func loggedActors(t *testing.T, logs string, k string) []auditActor {
	t.Helper()
	var got []auditActor
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var l struct {
			Msg, Key, Transport string
			Principal           *string // "" is the anonymous principal; absent is a bug
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if l.Key != k {
			continue
		}
		if l.Principal == nil {
			t.Fatalf("log line %s has no principal field", line)
		}
		got = append(got, auditActor{Op: l.Msg, Principal: *l.Principal, Transport: l.Transport})
	}
	return got
}

const hooksToken = "hooks-token-for-attribution-tests-0123456789"

// TestWritesAreAttributed: the audit row and the log line of each Claim,
// Transition, Renew and Release name the principal that made it and the
// transport it came by, on each durable tier, for each transport; a
// server without an auth file writes the anonymous principal "". The
// names come from the server's context (the auth interceptor, the
// listener), never from the request.
func TestWritesAreAttributed(t *testing.T) {
	authFile := `version: 1
default_rate: unlimited
principals:
  hooks:
    tokens: ["` + auth.HashToken(hooksToken) + `"]
    namespaces: [billing]
    roles: [claim, read]
`
	transports := []struct {
		desc      string
		call      caller
		transport string
	}{
		{"gRPC listener", grpcCaller, auth.TransportGRPC},
		{"REST", restCaller, auth.TransportREST},
		{"Connect JSON", connectCaller, auth.TransportConnect},
	}
	for _, tier := range []struct {
		name string
		open func(*testing.T) auditedTier
	}{{"redis+postgres", auditedProduction}, {"embedded", auditedEmbedded}} {
		t.Run(tier.name, func(t *testing.T) {
			at := tier.open(t)
			named := newAttributedServer(t, at, authFile)
			anonymous := newAttributedServer(t, at, "")
			for _, tc := range []struct {
				desc      string
				srv       *attributedServer
				token     string
				principal string
			}{{"hooks", named, hooksToken, "hooks"}, {"anonymous", anonymous, "", ""}} {
				for _, tr := range transports {
					t.Run(tc.desc+" over "+tr.desc, func(t *testing.T) {
						k := "evt_" + strings.ReplaceAll(tc.desc+"_"+tr.transport, "-", "_")
						writeFour(t, tc.srv, tr.call, tc.token, k)
						var want []auditActor
						for _, op := range []string{"Claim", "Transition", "Renew", "Release"} {
							want = append(want, auditActor{Op: op, Principal: tc.principal, Transport: tr.transport})
						}
						if diff := cmp.Diff(want, loggedActors(t, tc.srv.logs.String(), k)); diff != "" {
							t.Errorf("log lines of %s (-want +got):\n%s", k, diff)
						}
						for i := range want {
							want[i].Op = strings.ToLower(want[i].Op)
						}
						if diff := cmp.Diff(want, at.rows(t, k)); diff != "" {
							t.Errorf("audit rows of %s (-want +got):\n%s", k, diff)
						}
					})
				}
			}
		})
	}
}
