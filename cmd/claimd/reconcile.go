package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/push"
	"google.golang.org/grpc/status"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/reconcile"
)

// Exit codes of claimd reconcile: 0 clean, 1 something needs a person, 2 the
// run could not tell (a usage or connection error).
const (
	exitMismatch = 1
	exitCannot   = 2
)

// Bounds of the reads a reconciliation makes.
const (
	// reconcileBatch is how many keys one ListClaims asks about: the API's
	// maximum (ListClaimsRequest.keys).
	reconcileBatch = 1000
	// maxDeferredPages bounds the pages of ListDeferred read to find the
	// deferrals of events without a record: a million deferrals.
	maxDeferredPages = 1000
)

// reconcileConfig is what claimd reconcile reads.
type reconcileConfig struct {
	apiClientConfig
	Namespace, Provider string
	Events              string
	Types               string
	JSON, All           bool
	MinAge, StuckAfter  time.Duration
	MaxEvents           int
	Pushgateway         string
	PushJob             string
	MetricsTextfile     string
}

func bindReconcile(fs *flag.FlagSet, c *reconcileConfig) {
	fs.StringVar(&c.Namespace, "namespace", "", "namespace whose claims to compare; required")
	fs.StringVar(&c.Provider, "provider", "", "provider (or group) the handlers claim under; its key rule keys the events; required")
	fs.StringVar(&c.Events, "events", "", "the provider's events: Stripe's GET /v1/events list pages as JSON (one or several, "+
		"concatenated or one per line), or JSONL with one event object a line (any provider; Adyen: notifications or NotificationRequestItems); - reads stdin; required")
	fs.StringVar(&c.Types, "types", "", "compare only events of these `TYPES`, comma-separated, a trailing * for a prefix (charge.*,payment_intent.succeeded): "+
		"the types your webhook endpoint subscribes to, as a provider's list holds every event of the account; default: all")
	fs.BoolVar(&c.JSON, "json", false, "print the findings as one JSON object instead of a table")
	fs.BoolVar(&c.All, "all", false, "list every event, not only those that need a person")
	fs.DurationVar(&c.MinAge, "min-age", 10*time.Minute, "an event younger than this without a record is too_recent, not never_delivered: its first delivery may be on its way")
	fs.DurationVar(&c.StuckAfter, "stuck-after", time.Hour, "an unsettled record first claimed longer ago than this is stuck even while its holder renews the lease; 0 disables")
	fs.IntVar(&c.MaxEvents, "max-events", reconcile.DefaultMaxEvents, fmt.Sprintf("refuse a file of more events (the file may hold at most %d MiB)", reconcile.DefaultMaxBytes>>20))
	fs.StringVar(&c.Pushgateway, "pushgateway", "", "push claimd_reconciliation_mismatch_total to this Prometheus Pushgateway `URL` when done (job --push-job, grouped by namespace and instance=provider)")
	fs.StringVar(&c.PushJob, "push-job", "claimd_reconcile", "job label of the push")
	fs.StringVar(&c.MetricsTextfile, "metrics-textfile", "", "write claimd_reconciliation_mismatch_total to this `FILE` (node-exporter's textfile collector: name it *.prom) when done")
	bindAPIClient(fs, &c.apiClientConfig)
}

// exitError carries the exit code of an error that is not the usual 1 (see
// exitCode).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// runReconcile compares the provider's events of --events with the claims
// of --namespace, prints what needs a person, publishes the counts when
// asked, and exits 1 when anything needs a person.
func runReconcile(ctx context.Context, args []string, stdout, _ io.Writer) error {
	var c reconcileConfig
	fs := newFlagSet("reconcile")
	bindReconcile(fs, &c)
	if err := parse(fs, args); err != nil {
		return err
	}
	sum, err := reconcileRun(ctx, &c, stdout)
	switch {
	case errors.Is(err, errUsage):
		return err
	case err != nil:
		return &exitError{code: exitCannot, err: fmt.Errorf("reconcile: %w", err)}
	}
	if n := sum.Mismatches(); n > 0 {
		return &exitError{code: exitMismatch, err: fmt.Errorf("reconcile: %d of the provider's events need a person", n)}
	}
	return nil
}

func (c *reconcileConfig) check() error {
	switch {
	case c.Namespace == "":
		return fmt.Errorf("%w: --namespace is required", errUsage)
	case c.Provider == "":
		return fmt.Errorf("%w: --provider is required", errUsage)
	case c.Events == "":
		return fmt.Errorf("%w: --events is required (a file of the provider's events, or - for stdin)", errUsage)
	case c.MinAge < 0 || c.StuckAfter < 0:
		return fmt.Errorf("%w: --min-age and --stuck-after must not be negative", errUsage)
	case c.MaxEvents <= 0:
		return fmt.Errorf("%w: --max-events %d must be positive", errUsage, c.MaxEvents)
	case c.PushJob == "" && c.Pushgateway != "":
		return fmt.Errorf("%w: --push-job must not be empty", errUsage)
	}
	return nil
}

// typePatterns splits --types.
func (c *reconcileConfig) typePatterns() []string {
	var out []string
	for _, p := range strings.Split(c.Types, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// reconcileRun does the work; errors are the run's, mismatches are in the
// summary.
func reconcileRun(ctx context.Context, c *reconcileConfig, stdout io.Writer) (reconcile.Summary, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	in, err := openEvents(c.Events)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	cl, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	conn := cl.Conn()

	cctx, cancel := c.call(ctx)
	prov, err := pb.NewProviderServiceClient(conn).GetProvider(cctx, &pb.GetProviderRequest{Name: c.Provider})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("GetProvider %s: %w", c.Provider, rpcErr(err))
	}
	p := prov.GetProvider()
	key, err := reconcile.KeyRule(p.GetName(), p.GetKeyRule())
	if err != nil {
		return nil, err
	}
	events, err := reconcile.ReadEvents(in, reconcile.Limits{MaxEvents: c.MaxEvents}, key)
	if err != nil {
		return nil, fmt.Errorf("--events %s: %w", c.Events, err)
	}
	events = reconcile.FilterTypes(events, c.typePatterns())
	records, err := c.listClaims(ctx, pb.NewInspectServiceClient(conn), events)
	if err != nil {
		return nil, err
	}
	deferrals, err := c.listDeferred(ctx, pb.NewEntityServiceClient(conn), events, records)
	if err != nil {
		return nil, err
	}
	policy := reconcile.Policy{
		Now:     clock.Real{}.Now(),
		Horizon: p.GetRetryHorizon().AsDuration(), Window: p.GetTtl().AsDuration(),
		MinAge: c.MinAge, StuckAfter: c.StuckAfter,
	}
	findings := make([]reconcile.Finding, 0, len(events))
	for _, e := range events {
		findings = append(findings, reconcile.Classify(e, records[e.Key], deferrals[e.Key], policy))
	}
	sortFindings(findings)
	sum := reconcile.Summarize(findings)
	if c.JSON {
		err = c.printJSON(stdout, policy.Now, findings, sum)
	} else {
		err = c.printTable(stdout, findings, sum)
	}
	if err != nil {
		return nil, err
	}
	return sum, c.publish(sum)
}

// openEvents opens the events file, refusing one larger than the bound
// before reading it (ReadEvents bounds a stream too).
func openEvents(path string) (io.ReadCloser, error) {
	if path == "-" {
		return io.NopCloser(os.Stdin), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: --events: %v", errUsage, err)
	}
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > reconcile.DefaultMaxBytes {
		f.Close()
		return nil, fmt.Errorf("--events %s: %w: %d bytes, more than %d; split it by time (Stripe: created[gte], created[lt])",
			path, reconcile.ErrTooLarge, st.Size(), reconcile.DefaultMaxBytes)
	}
	return f, nil
}

// rpcErr keeps a status error's code and message, without the client's
// wrapping.
func rpcErr(err error) error {
	if s, ok := status.FromError(err); ok {
		return fmt.Errorf("%s: %s", s.Code(), s.Message())
	}
	return err
}

// listClaims asks ListClaims about the events' keys, reconcileBatch at a
// time, and returns the records found by key.
func (c *reconcileConfig) listClaims(ctx context.Context, inspect pb.InspectServiceClient, events []reconcile.Event) (map[string]*reconcile.Record, error) {
	out := make(map[string]*reconcile.Record, len(events))
	for batch := range slices.Chunk(events, reconcileBatch) {
		keys := make([]string, len(batch))
		for i, e := range batch {
			keys[i] = e.Key
		}
		token := ""
		for page := 0; ; page++ {
			if page > len(keys) {
				return nil, errors.New("ListClaims: the server keeps answering pages for one batch of keys")
			}
			cctx, cancel := c.call(ctx)
			resp, err := inspect.ListClaims(cctx, &pb.ListClaimsRequest{
				Namespace: c.Namespace, Provider: c.Provider, Keys: keys, PageSize: reconcileBatch, PageToken: token,
			})
			cancel()
			if err != nil {
				return nil, fmt.Errorf("ListClaims: %w", rpcErr(err))
			}
			for _, r := range resp.GetRecords() {
				out[r.GetKey()] = &reconcile.Record{
					State:        reconcile.State(strings.TrimPrefix(r.GetState().String(), "EVENT_STATE_")),
					Holder:       r.GetHolder(),
					Released:     r.GetReleased(),
					FirstSeen:    r.GetFirstSeenAt().AsTime(),
					LeaseExpires: r.GetLeaseExpiresAt().AsTime(),
				}
			}
			if token = resp.GetNextPageToken(); token == "" {
				break
			}
		}
	}
	return out, nil
}

// listDeferred finds the deferrals of the events claimd holds no record of
// (a DEFERRED or SUPERSEDED claim writes none). ListDeferred lists a
// provider's deferrals newest first; it is read until every such event is
// found or the list ends.
func (c *reconcileConfig) listDeferred(ctx context.Context, entities pb.EntityServiceClient, events []reconcile.Event, records map[string]*reconcile.Record) (map[string]*reconcile.Deferral, error) {
	missing := map[string]bool{}
	for _, e := range events {
		if records[e.Key] == nil {
			missing[e.Key] = true
		}
	}
	out := map[string]*reconcile.Deferral{}
	token := ""
	for page := 0; len(missing) > 0; page++ {
		if page == maxDeferredPages {
			return nil, fmt.Errorf("ListDeferred: more than %d deferrals in %s/%s; reconcile a shorter span of events", maxDeferredPages*reconcileBatch, c.Namespace, c.Provider)
		}
		cctx, cancel := c.call(ctx)
		resp, err := entities.ListDeferred(cctx, &pb.ListDeferredRequest{Namespace: c.Namespace, Provider: c.Provider, PageSize: reconcileBatch, PageToken: token})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("ListDeferred: %w", rpcErr(err))
		}
		for _, d := range resp.GetEvents() {
			if !missing[d.GetKey()] {
				continue
			}
			delete(missing, d.GetKey())
			out[d.GetKey()] = &reconcile.Deferral{
				Superseded: d.GetSuperseded(), Applied: d.GetApplied(),
				FirstSeen: d.GetFirstSeenAt().AsTime(), Awaiting: d.GetAwaiting(),
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	return out, nil
}

// sortFindings puts what needs a person first, in the order of
// reconcile.Kinds, then oldest event first.
func sortFindings(fs []reconcile.Finding) {
	rank := map[reconcile.Kind]int{}
	for i, k := range reconcile.Kinds {
		rank[k] = i
	}
	slices.SortStableFunc(fs, func(a, b reconcile.Finding) int {
		if d := rank[a.Kind] - rank[b.Kind]; d != 0 {
			return d
		}
		return a.Created.Compare(b.Created)
	})
}

// shown is what the output lists: the findings that need a person, or all
// with --all.
func (c *reconcileConfig) shown(fs []reconcile.Finding) []reconcile.Finding {
	if c.All {
		return fs
	}
	var out []reconcile.Finding
	for _, f := range fs {
		if f.Kind.NeedsPerson() {
			out = append(out, f)
		}
	}
	return out
}

// summaryLine says how many events were compared and what was found.
func (c *reconcileConfig) summaryLine(fs []reconcile.Finding, sum reconcile.Summary) string {
	var parts []string
	for _, k := range reconcile.Kinds {
		if n := sum[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, k))
		}
	}
	found := "none"
	if len(parts) > 0 {
		found = strings.Join(parts, ", ")
	}
	return fmt.Sprintf("%d events of %s compared with namespace %s: %s; %d need a person", len(fs), c.Provider, c.Namespace, found, sum.Mismatches())
}

func (c *reconcileConfig) printTable(w io.Writer, fs []reconcile.Finding, sum reconcile.Summary) error {
	if rows := c.shown(fs); len(rows) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "KIND\tEVENT\tTYPE\tCREATED\tSTATE\tHOLDER\tAGE\tWHY")
		for _, f := range rows {
			created, age := "-", "-"
			if !f.Created.IsZero() {
				created = f.Created.Format(time.RFC3339)
			}
			if f.Age > 0 {
				age = f.Age.Round(time.Second).String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", f.Kind, dash(f.ID), dash(f.Type), created, dash(f.State), dash(f.Holder), age, f.Why)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintln(w, c.summaryLine(fs, sum))
	return err
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// reconcileReport is the --json output.
type reconcileReport struct {
	Namespace   string           `json:"namespace"`
	Provider    string           `json:"provider"`
	CheckedAt   time.Time        `json:"checked_at"`
	Events      int              `json:"events"`
	NeedsPerson int              `json:"needs_person"`
	Counts      map[string]int   `json:"counts"`
	Findings    []reconcileEntry `json:"findings"`
	Summary     string           `json:"summary"`
}

type reconcileEntry struct {
	Kind       string     `json:"kind"`
	EventID    string     `json:"event_id,omitempty"`
	Type       string     `json:"type,omitempty"`
	Created    *time.Time `json:"created,omitempty"`
	Key        string     `json:"key"`
	State      string     `json:"state,omitempty"`
	Holder     string     `json:"holder,omitempty"`
	AgeSeconds int64      `json:"age_seconds"`
	Why        string     `json:"why"`
}

func (c *reconcileConfig) printJSON(w io.Writer, now time.Time, fs []reconcile.Finding, sum reconcile.Summary) error {
	rep := reconcileReport{
		Namespace: c.Namespace, Provider: c.Provider, CheckedAt: now.UTC(), Events: len(fs),
		NeedsPerson: sum.Mismatches(), Counts: map[string]int{}, Findings: []reconcileEntry{},
		Summary: c.summaryLine(fs, sum),
	}
	for k, n := range sum {
		rep.Counts[string(k)] = n
	}
	for _, f := range c.shown(fs) {
		e := reconcileEntry{Kind: string(f.Kind), EventID: f.ID, Type: f.Type, Key: f.Key, State: f.State, Holder: f.Holder,
			AgeSeconds: int64(f.Age / time.Second), Why: f.Why}
		if !f.Created.IsZero() {
			t := f.Created
			e.Created = &t
		}
		rep.Findings = append(rep.Findings, e)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// publish writes the mismatch counts where the flags say: a Pushgateway
// and/or a textfile. A scheduled run exits before any scrape, so these
// are how its counts reach Prometheus.
func (c *reconcileConfig) publish(sum reconcile.Summary) error {
	if c.Pushgateway == "" && c.MetricsTextfile == "" {
		return nil
	}
	reg := prometheus.NewRegistry()
	reconcile.Count(reconcile.NewMetrics(reg), c.Provider, sum)
	if c.MetricsTextfile != "" {
		if err := prometheus.WriteToTextfile(c.MetricsTextfile, reg); err != nil {
			return fmt.Errorf("--metrics-textfile: %w", err)
		}
	}
	if c.Pushgateway != "" {
		// Push replaces the group's metrics: each run's counts stand until
		// the next run of the same namespace and provider.
		err := push.New(c.Pushgateway, c.PushJob).Gatherer(reg).
			Grouping("namespace", c.Namespace).Grouping("instance", c.Provider).
			Client(&http.Client{Timeout: c.Timeout}).Push()
		if err != nil {
			return fmt.Errorf("--pushgateway: %w", err)
		}
	}
	return nil
}
