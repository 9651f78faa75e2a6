package capacity

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/claimd/claimd/internal/tiers/redis"
)

// Write prints e for an operator: what each server holds and spends, and
// where each figure comes from.
func (e Estimate) Write(w io.Writer, s Sizes) error {
	in := e.In
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, a ...any) { fmt.Fprintf(tw, format+"\n", a...) }
	p("rate\t%s events/s (+%.0f%% duplicate deliveries), window %s, result %d bytes", formatCount(in.Rate), in.Duplicates*100, in.TTL, in.ResultBytes)
	p("")
	p("Redis\tlive keys\t%s\t(rate × window: one key per record until its window ends)", formatCount(e.LiveKeys))
	inDurable := ""
	if in.ResultBytes > redis.MaxInlineResult {
		inDurable = fmt.Sprintf("; a result past %d bytes is kept by PostgreSQL only", redis.MaxInlineResult)
	}
	p("\tmemory\t%s\t(%.0f bytes per record, used_memory%s)", formatBytes(e.RedisBytes), at(s.RedisBytes, in.ResultBytes), inDurable)
	p("PostgreSQL\tclaims rows\t%s\t(rate × (window + %s grace))", formatCount(e.ClaimRows), in.Grace)
	p("\tclaims disk\t%s\t(%.0f bytes per record with indexes)", formatBytes(e.ClaimBytes), at(s.ClaimsBytes, in.ResultBytes))
	p("\taudit rows\t%s\t(%.0f per event × (%s retention + the month being filled))", formatCount(e.AuditRows), s.AuditRowsPerEvent, days(in.Retention))
	p("\taudit disk\t%s\t(%.0f bytes per row)", formatBytes(e.AuditBytes), s.AuditBytes)
	p("\ttotal disk\t%s\t(live data; leave room for WAL, vacuum and growth)", formatBytes(e.ClaimBytes+e.AuditBytes))
	p("Archive\taudit/month\t%s\t(the audit log as Parquet, kept past the retention with --audit-export-dir: %.0f bytes per row)", formatBytes(e.ArchiveMonth), s.ArchiveBytes)
	p("")
	p("CPU (cores)\tclaims\t+ transitions\ttotal")
	total := e.Claims.add(e.Transitions)
	p("claimd\t%.2f\t%.2f\t%.2f", e.Claims.Claimd/1e6, e.Transitions.Claimd/1e6, total.Claimd/1e6)
	p("Redis\t%.2f\t%.2f\t%.2f", e.Claims.Redis/1e6, e.Transitions.Redis/1e6, total.Redis/1e6)
	p("PostgreSQL\t%.2f\t%.2f\t%.2f", e.Claims.Postgres/1e6, e.Transitions.Postgres/1e6, total.Postgres/1e6)
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, `
Sizes measured on Redis %s and PostgreSQL %s (%s, %s).
CPU per call from %s;
the two transitions of an event are a whole event of the lifecycle scenario
(Claim, PROCESSING, SETTLED) less a first claim.
`, s.Redis, s.Postgres, s.MeasuredBy, s.MeasuredOn, s.CPU.Source)
	return err
}

// formatCount prints a number of things with a metric suffix.
func formatCount(v float64) string {
	switch {
	case v >= 1e12:
		return fmt.Sprintf("%.1fT", v/1e12)
	case v >= 1e9:
		return fmt.Sprintf("%.1fG", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// formatBytes prints a size in binary units.
func formatBytes(v float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

func days(d time.Duration) string {
	return fmt.Sprintf("%.0fd", d.Hours()/24)
}
