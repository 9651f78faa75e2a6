package service

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/tiers/tierstest"
)

func TestQuote(t *testing.T) {
	tests := []struct {
		desc, got, want string
	}{
		{"short string in full", quote("Billing"), `"Billing"`},
		{"32 bytes in full", quote(strings.Repeat("a", 32)), `"` + strings.Repeat("a", 32) + `"`},
		{"long string cut, length said", quote(strings.Repeat("a", 1<<20)), `"` + strings.Repeat("a", 32) + `"… (1048576 bytes)`},
		{"a rune is not split", quote(strings.Repeat("a", 31) + "é" + "zz"), `"` + strings.Repeat("a", 31) + `"… (35 bytes)`},
		{"control bytes escaped", quote("\x00\x01"), `"\x00\x01"`},
		{"valid key logged in full", logField(strings.Repeat("k", MaxKeyBytes)), strings.Repeat("k", MaxKeyBytes)},
		{"refused key logged clipped", logField(strings.Repeat("k", MaxKeyBytes+1)), strings.Repeat("k", 32) + "… (256 bytes)"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.desc, tc.got, tc.want)
		}
	}
}

// TestRefusedInputIsClipped sends fields of 1 MiB (a gRPC message may be 4)
// and checks that neither the status (message and details) nor the log
// line repeats them: before, a 1 MiB namespace came back as a 4 MiB message
// (%q of control bytes), 4 MiB of details and a 5 MB log line.
func TestRefusedInputIsClipped(t *testing.T) {
	const size = 1 << 20
	huge := strings.Repeat("\x01", size) // %q would make 4 bytes of each
	big := strings.Repeat("a", size)
	var logs bytes.Buffer
	reg, err := horizon.Default()
	if err != nil {
		t.Fatal(err)
	}
	store := &tierstest.CountingStore{Store: embedded(t)}
	svc := New(Config{Store: store, Registry: reg, Clock: clock.NewFake(time.Now()), Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	ctx := context.Background()

	claim := func(mod func(*pb.ClaimRequest)) func() error {
		return func() error { _, err := svc.Claim(ctx, claimReq(mod)); return err }
	}
	tests := []struct {
		desc    string
		wantLen string // how the message gives the refused field's length
		call    func() error
	}{
		{"Claim namespace", "1048576 bytes", claim(func(r *pb.ClaimRequest) { r.Namespace = huge })},
		{"Claim namespace with a bad character", "(63 bytes)", claim(func(r *pb.ClaimRequest) { r.Namespace = "\x01" + huge[:62] })},
		{"Claim provider", "1048576 bytes", claim(func(r *pb.ClaimRequest) { r.Provider = huge })},
		{"Claim event_id, holder, attempt_id and scope", "1048576 bytes", claim(func(r *pb.ClaimRequest) {
			r.Key = &pb.ClaimRequest_EventId{EventId: huge}
			r.Holder, r.AttemptId, r.Scope = big, big, big
		})},
		{"Claim delivery header", "1048576 bytes", claim(func(r *pb.ClaimRequest) {
			r.Provider = "github" // key from the X-GitHub-Delivery header
			r.Key = &pb.ClaimRequest_Delivery{Delivery: &pb.Delivery{Headers: map[string]string{"X-GitHub-Delivery": big}, Body: []byte("{}")}}
		})},
		{"Transition", "1048576 bytes", func() error {
			_, err := svc.Transition(ctx, &pb.TransitionRequest{Namespace: huge, Provider: huge, Key: huge, FencingToken: 1, To: pb.EventState_EVENT_STATE_SETTLED})
			return err
		}},
		{"Get key", "1048576 bytes", func() error {
			_, err := svc.Get(ctx, &pb.GetRequest{Namespace: "billing", Provider: "stripe", Key: huge})
			return err
		}},
		{"GetProvider name", "1048576 bytes", func() error {
			_, err := svc.GetProvider(ctx, &pb.GetProviderRequest{Name: huge})
			return err
		}},
	}
	for _, tc := range tests {
		logs.Reset()
		err := tc.call()
		st := status.Convert(err)
		if err == nil {
			t.Errorf("%s: no error, want the request refused", tc.desc)
			continue
		}
		if n := len(st.Message()); n >= 1024 {
			t.Errorf("%s: status message is %d bytes, want < 1 KiB: %.200q…", tc.desc, n, st.Message())
		}
		if n := proto.Size(st.Proto()); n >= 4096 {
			t.Errorf("%s: status with details is %d bytes, want < 4 KiB", tc.desc, n)
		}
		if !strings.Contains(st.Message(), tc.wantLen) {
			t.Errorf("%s: status message %q does not say how long the field was", tc.desc, st.Message())
		}
		line := logs.Bytes()
		if n := len(line); n == 0 || n >= 2048 {
			t.Errorf("%s: log line is %d bytes, want one line < 2 KiB", tc.desc, n)
		}
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Errorf("%s: log line is not one JSON record: %v", tc.desc, err)
		}
	}
	if n := store.Writes.Load(); n != 0 {
		t.Errorf("refused requests reached the store %d times, want 0", n)
	}
}
