// Package capacity sizes a claimd deployment for an event rate: how many
// records Redis and PostgreSQL hold in steady state, how much memory and
// disk they take, and how much CPU claimd, Redis and PostgreSQL spend.
//
// Nothing in it is guessed. The sizes come from sizes.json, written by
// TestMeasure on a real Redis and PostgreSQL through claimd's own stores
// (used_memory and pg_total_relation_size over thousands of records); the
// CPU per claim comes from bench/results.json, the run BENCHMARKS.md
// reports. TestMeasure fails when either has moved away from sizes.json, so
// the file is re-measured (go test ./internal/capacity -update) rather than
// left stale. The one figure no measurement gives, the CPU of a Transition,
// is labelled as an estimate wherever it is used.
package capacity

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

//go:embed sizes.json
var sizesJSON []byte

// Sizes are the measured figures the model multiplies.
type Sizes struct {
	// MeasuredBy is the command that wrote the file; MeasuredOn its date;
	// Redis and Postgres the server versions measured.
	MeasuredBy string `json:"measured_by"`
	MeasuredOn string `json:"measured_on"`
	Redis      string `json:"redis_version"`
	Postgres   string `json:"postgres_version"`

	// RedisBytes is Redis memory (used_memory) per settled record, by the
	// size of its stored result: a point per measured size.
	RedisBytes []Point `json:"redis_bytes_per_record"`
	// ClaimsBytes is PostgreSQL disk (the claims table with its indexes and
	// TOAST, after the claim and two transitions and a VACUUM) per record,
	// by result size.
	ClaimsBytes []Point `json:"postgres_claims_bytes_per_record"`
	// AuditBytes is the audit log's disk per row (rows hold no result).
	AuditBytes float64 `json:"postgres_audit_bytes_per_row"`
	// AuditRowsPerEvent is how many audit rows one event writes: its claim
	// and its two transitions.
	AuditRowsPerEvent float64 `json:"audit_rows_per_event"`
	// ArchiveBytes is an audit row's share of the month's Parquet export
	// (claimd audit-export, --audit-export-dir): what the months past the
	// retention cost where they are kept.
	ArchiveBytes float64 `json:"parquet_audit_bytes_per_row"`

	CPU CPU `json:"cpu"`
}

// Point is a size measured for records whose result has ResultBytes bytes.
type Point struct {
	ResultBytes int     `json:"result_bytes"`
	Bytes       float64 `json:"bytes"`
}

// CPU is CPU time per call, in microseconds, by process.
type CPU struct {
	Source string `json:"source"`
	// NewClaim is a first claim (Redis+PostgreSQL, "all new keys").
	NewClaim Cost `json:"new_claim_us"`
	// Duplicate is a claim of a settled key ("all duplicates").
	Duplicate Cost `json:"duplicate_us"`
	// Lifecycle is a whole event: Claim, Transition to PROCESSING and
	// Transition to SETTLED with a small result (the "lifecycle" scenario).
	Lifecycle Cost `json:"lifecycle_event_us"`
}

// Cost is microseconds of CPU per call in each process.
type Cost struct {
	Claimd   float64 `json:"claimd"`
	Redis    float64 `json:"redis"`
	Postgres float64 `json:"postgres"`
}

func (c Cost) scale(f float64) Cost {
	return Cost{Claimd: c.Claimd * f, Redis: c.Redis * f, Postgres: c.Postgres * f}
}

// less is c − d, never below zero in any process.
func (c Cost) less(d Cost) Cost {
	return Cost{Claimd: max(c.Claimd-d.Claimd, 0), Redis: max(c.Redis-d.Redis, 0), Postgres: max(c.Postgres-d.Postgres, 0)}
}

func (c Cost) add(d Cost) Cost {
	return Cost{Claimd: c.Claimd + d.Claimd, Redis: c.Redis + d.Redis, Postgres: c.Postgres + d.Postgres}
}

// Measured returns the sizes embedded in the binary.
func Measured() (Sizes, error) {
	var s Sizes
	if err := json.Unmarshal(sizesJSON, &s); err != nil {
		return Sizes{}, fmt.Errorf("capacity: sizes.json: %w", err)
	}
	if len(s.RedisBytes) == 0 || len(s.ClaimsBytes) == 0 {
		return Sizes{}, fmt.Errorf("capacity: sizes.json has no measured points")
	}
	return s, nil
}

// at interpolates linearly between the measured points, and extrapolates
// past the last one with the slope of the last two (a larger result costs
// its own bytes again per byte).
func at(points []Point, resultBytes int) float64 {
	ps := append([]Point(nil), points...)
	sort.Slice(ps, func(i, j int) bool { return ps[i].ResultBytes < ps[j].ResultBytes })
	if len(ps) == 1 || resultBytes <= ps[0].ResultBytes {
		return ps[0].Bytes
	}
	for i := 1; i < len(ps); i++ {
		if resultBytes <= ps[i].ResultBytes || i == len(ps)-1 {
			a, b := ps[i-1], ps[i]
			slope := (b.Bytes - a.Bytes) / float64(b.ResultBytes-a.ResultBytes)
			return a.Bytes + slope*float64(resultBytes-a.ResultBytes)
		}
	}
	return ps[len(ps)-1].Bytes
}

// Input is what a deployment must carry.
type Input struct {
	Rate        float64       // new events per second (first deliveries)
	TTL         time.Duration // the provider's window: retry horizon + margin
	ResultBytes int           // stored result per record
	Duplicates  float64       // extra deliveries per event (provider retries); answered by Redis or the process cache, so they cost CPU and no storage
	Grace       time.Duration // claims kept past their window (janitor --grace)
	Retention   time.Duration // audit rows kept (janitor --retention)
}

// Estimate is the steady state of a deployment fed Input for longer than
// its window and retention.
type Estimate struct {
	In Input

	LiveKeys   float64 // Redis keys: one per record within its window
	RedisBytes float64

	ClaimRows  float64 // claims rows: window + grace
	ClaimBytes float64
	AuditRows  float64 // audit rows: retention, plus the month being filled (only durable decisions are audited)
	AuditBytes float64
	// ArchiveMonth is a month of the audit log as a Parquet export.
	ArchiveMonth float64

	// Claims is the CPU per second of the claims alone (measured per call);
	// Transitions that of the two transitions per event: a whole event of
	// the lifecycle scenario less a first claim, both from the same run.
	Claims, Transitions Cost
}

// month is how much audit a partition holds: retention drops whole months,
// so up to a month more than the retention is on disk.
const month = 31 * 24 * time.Hour

// Estimate multiplies in by s.
func (s Sizes) Estimate(in Input) Estimate {
	e := Estimate{In: in}
	e.LiveKeys = in.Rate * in.TTL.Seconds()
	e.RedisBytes = e.LiveKeys * at(s.RedisBytes, in.ResultBytes)
	e.ClaimRows = in.Rate * (in.TTL + in.Grace).Seconds()
	e.ClaimBytes = e.ClaimRows * at(s.ClaimsBytes, in.ResultBytes)
	e.AuditRows = in.Rate * s.AuditRowsPerEvent * (in.Retention + month).Seconds()
	e.AuditBytes = e.AuditRows * s.AuditBytes
	e.ArchiveMonth = in.Rate * s.AuditRowsPerEvent * month.Seconds() * s.ArchiveBytes
	e.Claims = s.CPU.NewClaim.scale(in.Rate).add(s.CPU.Duplicate.scale(in.Rate * in.Duplicates))
	e.Transitions = s.CPU.Lifecycle.less(s.CPU.NewClaim).scale(in.Rate)
	return e
}
