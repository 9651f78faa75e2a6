package horizon

import (
	"fmt"
	"io"
	"slices"
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
// and group, sorted by name: what `claimd providers` prints. A key rule of
// alternatives shows one alternative per line, the later ones marked "| ",
// in the order they are tried; FAMILIES lists the webhook families the rule
// covers, one per line. A review is overdue when reviewed_on is more than
// reviewAge before now (reviewAge <= 0 never marks one overdue).
func (r *Registry) Table(w io.Writer, now time.Time, reviewAge time.Duration) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if _, err := fmt.Fprintln(tw, "NAME\tHORIZON\tMARGIN\tTTL\tLEASE\tMAX_LEASE\tKEY RULE\tFAMILIES\tSOURCE\tREVIEWED\tOVERDUE"); err != nil {
		return err
	}
	for _, p := range r.sorted {
		rules := []string{"-"}
		if p.Rule != nil {
			rules = rules[:0]
			for i, a := range p.Rule.Alternatives() {
				if i > 0 {
					rules = append(rules, "| "+a.String())
				} else {
					rules = append(rules, a.String())
				}
			}
		}
		families := p.Families
		if len(families) == 0 {
			families = []string{"-"}
		}
		source := p.Source
		if p.IsGroup() {
			source = fmt.Sprintf("group of %s; ttl from %s", strings.Join(p.Members, ", "), p.DrivenBy)
		}
		overdue := "no"
		if p.ReviewOverdue(now, reviewAge) {
			overdue = "yes"
		}
		_, err := fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			p.Name, FormatDuration(p.RetryHorizon), FormatDuration(p.Margin), FormatDuration(p.TTL),
			FormatDuration(p.Lease), FormatDuration(p.MaxLease), rules[0], families[0], source,
			p.ReviewedOn.Format(time.DateOnly), overdue)
		if err != nil {
			return err
		}
		for i := 1; i < max(len(rules), len(families)); i++ {
			if _, err := fmt.Fprintf(tw, "\t\t\t\t\t\t%s\t%s\t\t\t\n", at(rules, i), at(families, i)); err != nil {
				return err
			}
		}
	}
	return tw.Flush()
}

// at returns s[i], or "" past its end.
func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return ""
}

// LifecycleGraphs writes the lifecycles of the registry's providers, by
// provider name, as readable graphs: what `claimd providers` prints below
// its table. Each lifecycle shows its rules, its states (the initial one
// marked), and one line per event type: the states it may arrive in → the
// state it leads to, the states in which it is deferred (from which a
// state it may arrive in is still reachable; in any other it is
// superseded), and its own entity rule if it has one. It writes nothing
// when no provider declares a lifecycle, and otherwise starts with a blank
// line, so that a script reading the table's rows stops there.
func (r *Registry) LifecycleGraphs(w io.Writer) error {
	first := true
	for _, p := range r.sorted {
		for _, l := range p.Lifecycles {
			if first {
				if _, err := fmt.Fprint(w, "\nLIFECYCLES\n"); err != nil {
					return err
				}
				first = false
			}
			if err := writeGraph(w, p.Name, l); err != nil {
				return err
			}
		}
	}
	return nil
}

func writeGraph(w io.Writer, provider string, l *Lifecycle) error {
	states := slices.Clone(l.States)
	states[0] += " (initial)"
	_, err := fmt.Fprintf(w, "\n%s %s: entity %s, event type %s\n  source: %s\n  states: %s\n",
		provider, l.Name, l.EntityRule, l.EventTypeRule, l.Source, strings.Join(states, ", "))
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if _, err := fmt.Fprintln(tw, "  EVENT\tFROM → TO\tDEFERRED IN\tENTITY"); err != nil {
		return err
	}
	for _, e := range l.Events {
		wait, entity := "-", "-"
		if len(e.Wait) > 0 {
			wait = strings.Join(e.Wait, ", ")
		}
		if e.EntityRule != "" {
			entity = e.EntityRule
		}
		if _, err := fmt.Fprintf(tw, "  %s\t%s → %s\t%s\t%s\n", e.EventType, strings.Join(e.From, ", "), e.To, wait, entity); err != nil {
			return err
		}
	}
	return tw.Flush()
}
