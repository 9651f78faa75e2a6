package claimd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestBackoffFor(t *testing.T) {
	p := RetryPolicy{BaseBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}.withDefaults()
	tests := []struct {
		desc    string
		attempt int
		ceiling time.Duration
	}{
		{desc: "after the first attempt", attempt: 1, ceiling: 100 * time.Millisecond},
		{desc: "doubles", attempt: 2, ceiling: 200 * time.Millisecond},
		{desc: "doubles again", attempt: 3, ceiling: 400 * time.Millisecond},
		{desc: "capped", attempt: 10, ceiling: time.Second},
		{desc: "capped without overflow", attempt: 1000, ceiling: time.Second},
	}
	for _, tt := range tests {
		if got := backoffCeiling(p, tt.attempt); got != tt.ceiling {
			t.Errorf("%s: backoffCeiling(%d) = %v, want %v", tt.desc, tt.attempt, got, tt.ceiling)
		}
		// Full jitter: anywhere in [0, ceiling], so 200 draws cover both
		// halves of the range.
		var low, high bool
		for range 200 {
			got := backoffFor(p, tt.attempt)
			if got < 0 || got > tt.ceiling {
				t.Fatalf("%s: backoffFor(%d) = %v, want in [0, %v]", tt.desc, tt.attempt, got, tt.ceiling)
			}
			low, high = low || got < tt.ceiling/2, high || got >= tt.ceiling/2
		}
		if !low || !high {
			t.Errorf("%s: 200 draws of backoffFor(%d) all in one half of [0, %v] (low %v, high %v)", tt.desc, tt.attempt, tt.ceiling, low, high)
		}
	}
}

// TestGuardSpecInternalConstants: the retry defaults and the heartbeat are
// the contract's (clients/guardspec constants); the exported constants are
// checked by TestGuardSpecConstants.
func TestGuardSpecInternalConstants(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "guardspec", "scenarios.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Constants struct {
			HeartbeatDivisor int `json:"heartbeat_divisor"`
			HeartbeatFloorMS int `json:"heartbeat_floor_ms"`
			Retry            struct {
				MaxAttempts    int `json:"max_attempts"`
				BaseBackoffMS  int `json:"base_backoff_ms"`
				MaxBackoffMS   int `json:"max_backoff_ms"`
				Multiplier     int `json:"multiplier"`
				TotalTimeoutMS int `json:"total_timeout_ms"`
			} `json:"retry"`
		} `json:"constants"`
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	c := spec.Constants
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	p := RetryPolicy{}.withDefaults()
	want := RetryPolicy{MaxAttempts: c.Retry.MaxAttempts, BaseBackoff: ms(c.Retry.BaseBackoffMS), MaxBackoff: ms(c.Retry.MaxBackoffMS), MaxElapsed: ms(c.Retry.TotalTimeoutMS)}
	if p != want {
		t.Errorf("RetryPolicy{}.withDefaults() = %+v, want %+v", p, want)
	}
	if got, want := backoffCeiling(p, 2), p.BaseBackoff*time.Duration(c.Retry.Multiplier); got != want {
		t.Errorf("backoffCeiling(2) = %v, want base × multiplier = %v", got, want)
	}
	c0 := &Client{opts: defaultOptions()}
	if got, want := c0.heartbeatEvery(3*time.Second, Claim{}), 3*time.Second/time.Duration(c.HeartbeatDivisor); got != want {
		t.Errorf("heartbeatEvery(3s) = %v, want %v", got, want)
	}
	if got, want := c0.heartbeatEvery(time.Millisecond, Claim{}), ms(c.HeartbeatFloorMS); got != want {
		t.Errorf("heartbeatEvery(1ms) = %v, want the floor %v", got, want)
	}
}

func TestRetryPolicyDefaults(t *testing.T) {
	got := RetryPolicy{MaxBackoff: time.Millisecond, BaseBackoff: time.Second}.withDefaults()
	want := RetryPolicy{MaxAttempts: 4, BaseBackoff: time.Second, MaxBackoff: time.Second, MaxElapsed: 10 * time.Second}
	if got != want {
		t.Errorf("withDefaults() = %+v, want %+v", got, want)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	tests := []struct {
		desc  string
		until time.Time
		want  time.Duration
	}{
		{desc: "already past", until: now.Add(-time.Minute), want: time.Second},
		{desc: "now", until: now, want: time.Second},
		{desc: "a fraction rounds up", until: now.Add(1500 * time.Millisecond), want: 2 * time.Second},
		{desc: "whole seconds stay", until: now.Add(42 * time.Second), want: 42 * time.Second},
	}
	for _, tt := range tests {
		if got := retryAfter(tt.until, now); got != tt.want {
			t.Errorf("%s: retryAfter(now%+v) = %v, want %v", tt.desc, tt.until.Sub(now), got, tt.want)
		}
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		desc, in string
		n        int
		want     string
	}{
		{desc: "short", in: "abc", n: 5, want: "abc"},
		{desc: "exact", in: "abcde", n: 5, want: "abcde"},
		{desc: "cut", in: "abcdef", n: 5, want: "abcde"},
		{desc: "never splits a rune", in: "ab€", n: 4, want: "ab"},
		{desc: "long", in: strings.Repeat("x", 5000), n: MaxFailureText, want: strings.Repeat("x", MaxFailureText)},
	}
	for _, tt := range tests {
		if got := truncate(tt.in, tt.n); got != tt.want {
			t.Errorf("%s: truncate(%q, %d) = %q, want %q", tt.desc, tt.in, tt.n, got, tt.want)
		}
	}
}
