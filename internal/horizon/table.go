package horizon

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// FormatDuration renders d the way providers files write durations: whole
// hours as hours (72h, 720h), under an hour in whole minutes as minutes
// (10m), under two minutes in whole seconds as seconds (60s, 15s), and
// anything else as Go does without its zero units (27h35m5s, 1h30m).
func FormatDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d > 0 && d < time.Hour && d >= 2*time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d > 0 && d < 2*time.Minute && d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Table writes the registry as an aligned text table, one row per provider
// and group, sorted by name: what `claimd providers` prints. A review is
// overdue when reviewed_on is more than reviewAge before now (reviewAge <= 0
// never marks one overdue).
func (r *Registry) Table(w io.Writer, now time.Time, reviewAge time.Duration) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if _, err := fmt.Fprintln(tw, "NAME\tHORIZON\tMARGIN\tTTL\tLEASE\tMAX_LEASE\tKEY RULE\tSOURCE\tREVIEWED\tOVERDUE"); err != nil {
		return err
	}
	for _, p := range r.sorted {
		rule := p.KeyRule
		if rule == "" {
			rule = "-"
		}
		source := p.Source
		if p.IsGroup() {
			source = fmt.Sprintf("group of %s; ttl from %s", strings.Join(p.Members, ", "), p.DrivenBy)
		}
		overdue := "no"
		if p.ReviewOverdue(now, reviewAge) {
			overdue = "yes"
		}
		_, err := fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			p.Name, FormatDuration(p.RetryHorizon), FormatDuration(p.Margin), FormatDuration(p.TTL),
			FormatDuration(p.Lease), FormatDuration(p.MaxLease), rule, source,
			p.ReviewedOn.Format(time.DateOnly), overdue)
		if err != nil {
			return err
		}
	}
	return tw.Flush()
}
