package claimd

import (
	"strings"
	"testing"
	"time"
)

func TestBackoffFor(t *testing.T) {
	p := RetryPolicy{BaseBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}.withDefaults()
	tests := []struct {
		desc     string
		attempt  int
		min, max time.Duration
	}{
		{desc: "after the first attempt", attempt: 1, min: 50 * time.Millisecond, max: 100 * time.Millisecond},
		{desc: "doubles", attempt: 2, min: 100 * time.Millisecond, max: 200 * time.Millisecond},
		{desc: "doubles again", attempt: 3, min: 200 * time.Millisecond, max: 400 * time.Millisecond},
		{desc: "capped", attempt: 10, min: 500 * time.Millisecond, max: time.Second},
		{desc: "capped without overflow", attempt: 1000, min: 500 * time.Millisecond, max: time.Second},
	}
	for _, tt := range tests {
		for range 100 {
			if got := backoffFor(p, tt.attempt); got < tt.min || got > tt.max {
				t.Fatalf("%s: backoffFor(%d) = %v, want in [%v, %v]", tt.desc, tt.attempt, got, tt.min, tt.max)
			}
		}
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
