package capacity

import (
	"math"
	"testing"
	"time"
)

// TestAt: sizes between measured points are interpolated, sizes past the
// last extrapolated with the last slope.
func TestAt(t *testing.T) {
	ps := []Point{{0, 100}, {100, 300}, {1000, 1200}}
	for _, tc := range []struct {
		result int
		want   float64
	}{{0, 100}, {50, 200}, {100, 300}, {550, 750}, {2000, 2200}} {
		if got := at(ps, tc.result); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("at(%d) = %v, want %v", tc.result, got, tc.want)
		}
	}
}

// TestEstimate: the model multiplies rate by window, grace and retention.
func TestEstimate(t *testing.T) {
	s := Sizes{
		RedisBytes:  []Point{{0, 500}},
		ClaimsBytes: []Point{{0, 400}},
		AuditBytes:  200, AuditRowsPerEvent: 3, ArchiveBytes: 40,
		CPU: CPU{NewClaim: Cost{Claimd: 100, Redis: 50, Postgres: 40}, Duplicate: Cost{Claimd: 30},
			Lifecycle: Cost{Claimd: 300, Redis: 40, Postgres: 240}},
	}
	e := s.Estimate(Input{Rate: 10, TTL: time.Hour, Grace: time.Hour, Retention: 24 * time.Hour, Duplicates: 0.5})
	checks := []struct {
		what      string
		got, want float64
	}{
		{"live keys", e.LiveKeys, 36000},
		{"Redis bytes", e.RedisBytes, 36000 * 500},
		{"claim rows", e.ClaimRows, 72000},
		{"audit rows", e.AuditRows, 10 * 3 * (24*3600 + 31*24*3600)},
		{"a month of audit as Parquet", e.ArchiveMonth, 10 * 3 * 31 * 24 * 3600 * 40},
		{"claims CPU of claimd (µs/s)", e.Claims.Claimd, 10*100 + 5*30},
		{"transitions CPU of PostgreSQL (µs/s)", e.Transitions.Postgres, 10 * (240 - 40)},
		{"transitions CPU of claimd (µs/s)", e.Transitions.Claimd, 10 * (300 - 100)},
		{"transitions CPU of Redis (µs/s), never below zero", e.Transitions.Redis, 0},
	}
	for _, c := range checks {
		if math.Abs(c.got-c.want) > 1e-6 {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
}

// TestMeasuredLoads: the embedded sizes.json parses and has every figure.
func TestMeasuredLoads(t *testing.T) {
	s, err := Measured()
	if err != nil {
		t.Fatal(err)
	}
	if s.AuditBytes <= 0 || s.AuditRowsPerEvent <= 0 || s.ArchiveBytes <= 0 || s.CPU.NewClaim.Claimd <= 0 || s.CPU.Lifecycle.Claimd <= s.CPU.NewClaim.Claimd {
		t.Fatalf("Measured() = %+v: a figure is missing", s)
	}
}
