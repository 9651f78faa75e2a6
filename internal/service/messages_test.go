package service

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
)

func loggedService(t *testing.T, store tiers.Store) (*Service, *testenv.LogBuffer) {
	t.Helper()
	reg, err := horizon.Default()
	if err != nil {
		t.Fatal(err)
	}
	var buf testenv.LogBuffer
	return New(Config{Store: store, Registry: reg, Clock: clock.NewFake(time.Now()), Logger: slog.New(slog.NewJSONHandler(&buf, nil))}), &buf
}

// failingFollowUps answers Transition with err.
type failingFollowUps struct {
	tiers.Store
	err error
}

func (s failingFollowUps) Transition(context.Context, tiers.TransitionParams) (tiers.Record, bool, error) {
	return tiers.Record{}, false, s.err
}

// TestErrorMessagesAreClean: a caller reads what went wrong in its own terms
// (no backend names, no doubled keys, no addresses, no other holder's
// token); the log line keeps the detail for whoever is on call.
func TestErrorMessagesAreClean(t *testing.T) {
	tr := &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: "evt_K", FencingToken: 1, LeaseSecret: make([]byte, LeaseSecretBytes), To: pb.EventState_EVENT_STATE_PROCESSING}
	tests := []struct {
		desc      string
		store     func(t *testing.T) tiers.Store
		req       *pb.TransitionRequest
		forbidden []string // never in the caller's message
		logged    string   // kept in the log line
	}{
		{"missing key on the embedded tiers", embedded, tr,
			[]string{"sqlite", "billing:stripe:evt_K"}, "sqlite: transition billing:stripe:evt_K"},
		{"stale token does not reveal the current one", func(t *testing.T) tiers.Store {
			s := embedded(t)
			p := tiers.ClaimParams{Key: tiers.Key{Namespace: "billing", Provider: "stripe", Key: "evt_K"}, Now: time.Now(), Lease: time.Minute, TTL: time.Hour}
			for range 2 { // token 1, then a takeover: token 2
				if _, err := s.Claim(context.Background(), p); err != nil {
					t.Fatal(err)
				}
				p.Now = p.Now.Add(time.Hour - time.Second)
			}
			return s
		}, tr, []string{"sqlite", "current 2", "token 2"}, "current 2"},
		{"durable tier down", func(*testing.T) tiers.Store {
			return failingFollowUps{err: tiers.Unavailable("postgres", errors.New("transition billing:stripe:evt_K: dial tcp 10.1.2.3:5432: connect: connection refused"))}
		}, tr, []string{"postgres", "10.1.2.3", "dial"}, "10.1.2.3:5432"},
		{"a bug", func(*testing.T) tiers.Store {
			return failingFollowUps{err: errors.New(`postgres: transition: ERROR: relation "claims" does not exist (SQLSTATE 42P01)`)}
		}, tr, []string{"postgres", "SQLSTATE", "relation"}, "SQLSTATE 42P01"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			svc, log := loggedService(t, tc.store(t))
			_, err := svc.Transition(context.Background(), tc.req)
			if err == nil {
				t.Fatal("Transition error = nil")
			}
			msg := status.Convert(err).Message()
			for _, f := range tc.forbidden {
				if strings.Contains(msg, f) {
					t.Errorf("Transition(%s) message %q contains %q", tc.desc, msg, f)
				}
			}
			if !strings.Contains(log.String(), tc.logged) {
				t.Errorf("log of Transition(%s) = %s, want the detail %q", tc.desc, log.String(), tc.logged)
			}
		})
	}
}
