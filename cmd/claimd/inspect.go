package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/auditfile"
	"github.com/claimd/claimd/internal/service"
	"github.com/claimd/claimd/internal/tiers"
)

// Exit codes of claimd inspect: 0 the key has a record, 1 it has none, 2 a
// usage error, 3 claimd could not be asked (unreachable, refused, failed).
const (
	exitNotFound     = 1
	exitCouldNotAsk  = 3
	maxInspectPages  = 100 // of 1000 audit entries: a retry storm's log, bounded
	maxDeferredShown = 10  // pages of 100 deferred events of one entity
)

// inspectConfig is what claimd inspect reads.
type inspectConfig struct {
	apiClientConfig
	Namespace, Provider, Key, Scope string
	JSON                            bool
	File                            string
}

func bindInspect(fs *flag.FlagSet, c *inspectConfig) {
	fs.StringVar(&c.Namespace, "namespace", "", "the key's namespace; required")
	fs.StringVar(&c.Provider, "provider", "", "the provider (or group) it was claimed under; required")
	fs.StringVar(&c.Key, "key", "", "the canonical key Claim answered (the event id, or the key derived from the delivery); required")
	fs.StringVar(&c.Scope, "scope", "", "the claim's scope, when it had one (the canonical key is then key U+001F scope)")
	fs.BoolVar(&c.JSON, "json", false, "print one JSON document (record, next, audit, entity, deferred) instead of text")
	fs.StringVar(&c.File, "file", "", "read the key's audit trail from an exported month (claimd audit-export, serve --audit-export-dir), "+
		"a local .parquet file, instead of claimd's API; exits 1 when the file has no entry of the key")
	bindAPIClient(fs, &c.apiClientConfig)
}

// inspection is what claimd inspect found about one key.
type inspection struct {
	record   *pb.Record
	next     *pb.NextAnswer
	audit    []*pb.AuditEntry
	more     bool // the audit log goes on past what was read
	entity   *pb.Entity
	entityNF bool // the record names an entity no event was applied to or holds
	deferred []*pb.DeferredEvent
	file     string // the exported month the audit trail was read from (--file): no record, no entity
}

// runInspect prints one key's record, what its next delivery would be
// answered and why, its audit trail and its entity, read through claimd's
// API with the caller's credentials.
func runInspect(ctx context.Context, args []string, stdout, _ io.Writer) error {
	var c inspectConfig
	fs := newFlagSet("inspect")
	bindInspect(fs, &c)
	if err := parse(fs, args); err != nil {
		return err
	}
	run := inspectRun
	if c.File != "" {
		run = inspectFile
	}
	in, err := run(ctx, &c)
	switch {
	case errors.Is(err, errUsage):
		return err
	case err != nil:
		return &exitError{code: exitCouldNotAsk, err: fmt.Errorf("inspect: %w", err)}
	}
	if c.JSON {
		err = in.writeJSON(stdout)
	} else {
		err = in.writeText(stdout, c.Namespace, c.Provider, c.key())
	}
	if err != nil {
		return &exitError{code: exitCouldNotAsk, err: fmt.Errorf("inspect: %w", err)}
	}
	if in.file != "" && len(in.audit) == 0 {
		return &exitError{code: exitNotFound, err: fmt.Errorf("inspect: %s holds no audit entry of %s in %s/%s", in.file, printable(c.key()), c.Namespace, c.Provider)}
	}
	if in.record == nil && in.file == "" {
		return &exitError{code: exitNotFound, err: fmt.Errorf("inspect: no record of %s in %s/%s: it was never claimed, "+
			"it was only deferred or superseded, or its window ended and it was pruned", printable(c.key()), c.Namespace, c.Provider)}
	}
	return nil
}

// key is the canonical key the flags name.
func (c *inspectConfig) key() string {
	if c.Scope == "" {
		return c.Key
	}
	return c.Key + service.ScopeSeparator + c.Scope
}

func (c *inspectConfig) check() error {
	for _, f := range []struct{ name, v string }{{"namespace", c.Namespace}, {"provider", c.Provider}, {"key", c.Key}} {
		if f.v == "" {
			return fmt.Errorf("%w: --%s is required", errUsage, f.name)
		}
	}
	return nil
}

// inspectRun reads the key: Get (the record and its next answer), ListAudit
// (every page, up to maxInspectPages), and for a record in a lifecycle
// GetEntity and the entity's ListDeferred. A key without a record has a nil
// record, and still its audit log: a deferred event writes no record.
func inspectRun(ctx context.Context, c *inspectConfig) (*inspection, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	cl, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	conn := cl.Conn()
	in := &inspection{}
	key := c.key()

	cctx, cancel := c.call(ctx)
	got, err := pb.NewClaimServiceClient(conn).Get(cctx, &pb.GetRequest{Namespace: c.Namespace, Provider: c.Provider, Key: key})
	cancel()
	switch {
	case status.Code(err) == codes.NotFound && errorReason(err) == pb.ErrorReason_RECORD_NOT_FOUND.String():
	case err != nil:
		return nil, fmt.Errorf("reading the record (Get): %w", rpcErr(err))
	default:
		in.record, in.next = got.GetRecord(), got.GetNext()
	}

	inspect := pb.NewInspectServiceClient(conn)
	req := &pb.ListAuditRequest{Namespace: c.Namespace, Provider: c.Provider, Key: key, PageSize: 1000}
	for page := 0; ; page++ {
		if page == maxInspectPages {
			in.more = true
			break
		}
		cctx, cancel := c.call(ctx)
		resp, err := inspect.ListAudit(cctx, req)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("ListAudit: %w", rpcErr(err))
		}
		in.audit = append(in.audit, resp.GetEntries()...)
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}

	if rec := in.record; rec.GetEntityId() != "" {
		if err := in.readEntity(ctx, c, conn, rec); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// inspectFile reads the key's audit trail from the exported month
// c.File, a local file: no server is asked, and the record and entity are
// not in it.
func inspectFile(_ context.Context, c *inspectConfig) (*inspection, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	entries, err := auditfile.ReadKey(c.File, tiers.Key{Namespace: c.Namespace, Provider: c.Provider, Key: c.key()})
	if err != nil {
		return nil, err
	}
	in := &inspection{file: c.File}
	for _, e := range entries {
		in.audit = append(in.audit, service.AuditEntryProto(e))
	}
	return in, nil
}

// readEntity reads the entity of rec and its deferred events.
func (in *inspection) readEntity(ctx context.Context, c *inspectConfig, conn grpc.ClientConnInterface, rec *pb.Record) error {
	entities := pb.NewEntityServiceClient(conn)
	cctx, cancel := c.call(ctx)
	ent, err := entities.GetEntity(cctx, &pb.GetEntityRequest{Namespace: c.Namespace, Provider: c.Provider,
		Lifecycle: rec.GetLifecycle(), EntityId: rec.GetEntityId()})
	cancel()
	switch {
	case status.Code(err) == codes.NotFound && errorReason(err) == pb.ErrorReason_ENTITY_NOT_FOUND.String():
		in.entityNF = true
	case err != nil:
		return fmt.Errorf("GetEntity: %w", rpcErr(err))
	default:
		in.entity = ent.GetEntity()
	}
	req := &pb.ListDeferredRequest{Namespace: c.Namespace, Provider: c.Provider, EntityId: rec.GetEntityId()}
	for range maxDeferredShown {
		cctx, cancel := c.call(ctx)
		resp, err := entities.ListDeferred(cctx, req)
		cancel()
		if err != nil {
			return fmt.Errorf("ListDeferred: %w", rpcErr(err))
		}
		in.deferred = append(in.deferred, resp.GetEvents()...)
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	return nil
}

// errorReason is the ErrorInfo reason of a status error, "" without one.
func errorReason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(interface{ GetReason() string }); ok {
			return ei.GetReason()
		}
	}
	return ""
}

// writeJSON prints one JSON document: each part as protojson renders it
// (the API's own JSON, as the HTTP gateway answers it), null or [] when
// absent.
func (in *inspection) writeJSON(w io.Writer) error {
	doc := struct {
		Record         json.RawMessage   `json:"record"`
		Next           json.RawMessage   `json:"next"`
		Audit          []json.RawMessage `json:"audit"`
		AuditTruncated bool              `json:"auditTruncated"`
		Entity         json.RawMessage   `json:"entity"`
		Deferred       []json.RawMessage `json:"deferred"`
	}{Audit: []json.RawMessage{}, Deferred: []json.RawMessage{}, AuditTruncated: in.more}
	var err error
	raw := func(m proto.Message) json.RawMessage {
		if m == nil || !m.ProtoReflect().IsValid() || err != nil {
			return json.RawMessage("null")
		}
		var b []byte
		b, err = protojson.Marshal(m)
		return b
	}
	doc.Record, doc.Next, doc.Entity = raw(in.record), raw(in.next), raw(in.entity)
	for _, e := range in.audit {
		doc.Audit = append(doc.Audit, raw(e))
	}
	for _, d := range in.deferred {
		doc.Deferred = append(doc.Deferred, raw(d))
	}
	if err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// writeText prints the inspection for a person.
func (in *inspection) writeText(w io.Writer, ns, provider, key string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s/%s/%s\n", ns, provider, printable(key))
	if in.file != "" {
		fmt.Fprintf(tw, "  exported audit month %s: the record and entity are not in it (inspect without --file asks claimd)\n", in.file)
	} else if r := in.record; r != nil {
		released := ""
		if r.GetReleased() {
			released = ", released"
		}
		fmt.Fprintf(tw, "  state\t%s (token %d, attempt %d%s)\n", name(r.GetState()), r.GetFencingToken(), r.GetAttempt(), released)
		fmt.Fprintf(tw, "  holder\t%s\n", orNone(r.GetHolder()))
		fmt.Fprintf(tw, "  first seen\t%s\n", stamp(r.GetFirstSeenAt().AsTime()))
		fmt.Fprintf(tw, "  lease until\t%s\n", stamp(r.GetLeaseExpiresAt().AsTime()))
		fmt.Fprintf(tw, "  window until\t%s\n", stamp(r.GetWindowExpiresAt().AsTime()))
		fmt.Fprintf(tw, "  updated\t%s\n", stamp(r.GetUpdatedAt().AsTime()))
		if h := r.GetPayloadSha256(); len(h) > 0 {
			fmt.Fprintf(tw, "  payload sha256\t%x\n", h)
		}
		if len(r.GetResult()) > 0 {
			fmt.Fprintf(tw, "  result\t%d bytes\n", len(r.GetResult()))
		}
		if r.GetEntityId() != "" {
			fmt.Fprintf(tw, "  lifecycle\t%s of entity %s (%s)\n", r.GetEventType(), r.GetEntityId(), r.GetLifecycle())
		}
		n := in.next
		until := ""
		if n.GetUntil() != nil {
			until = " until " + stamp(n.GetUntil().AsTime())
		}
		fmt.Fprintf(tw, "\nnext delivery: %s%s\n  %s\n", answer(n.GetOutcome(), n.GetReason()), until, n.GetExplanation())
	} else {
		fmt.Fprintf(tw, "  no record: never claimed, only deferred or superseded, or pruned after its window\n")
	}

	fmt.Fprintf(tw, "\naudit trail, oldest first (%d %s):\n", len(in.audit), plural(len(in.audit), "entry", "entries"))
	if len(in.audit) > 0 {
		fmt.Fprintf(tw, "  AT\tOP\tANSWER\tSTATE\tTOKEN\tHOLDER\tPRINCIPAL\tTRANSPORT\tNOTE\n")
	}
	for _, e := range in.audit {
		op, ans, note := strings.TrimPrefix(e.GetOp().String(), "AUDIT_OP_"), "", ""
		switch e.GetOp() {
		case pb.AuditOp_AUDIT_OP_CLAIM:
			ans = answer(e.GetOutcome(), e.GetReason())
			if e.GetReason() == pb.Reason_REASON_LEASE_EXPIRED {
				note = "takeover: the previous holder's lease ran out"
			}
		case pb.AuditOp_AUDIT_OP_TRANSITION:
			ans = "→ " + name(e.GetState())
			if e.GetEffectRecovered() {
				note = "effect recovered: the result came from an earlier holder's effect fence"
			}
		}
		state := name(e.GetState())
		if e.GetState() == pb.EventState_EVENT_STATE_UNSPECIFIED {
			state = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", stamp(e.GetAt().AsTime()), strings.ToLower(op), orDash(ans), state,
			e.GetFencingToken(), orDash(e.GetHolder()), orDash(e.GetPrincipal()), orDash(e.GetTransport()), note)
	}
	if in.more {
		fmt.Fprintf(tw, "  … more entries follow (claimd inspect reads %d pages of 1000)\n", maxInspectPages)
	}

	if r := in.record; r.GetEntityId() != "" {
		fmt.Fprintf(tw, "\nentity %s (%s):\n", r.GetEntityId(), r.GetLifecycle())
		if ent := in.entity; ent != nil {
			busy := "free"
			if ent.GetBusyWith() != "" {
				busy = "held by " + printable(ent.GetBusyWith())
			}
			fmt.Fprintf(tw, "  state %s, version %d, %s, updated %s\n", ent.GetState(), ent.GetVersion(), busy, stamp(ent.GetUpdatedAt().AsTime()))
			for _, a := range ent.GetApplied() {
				fmt.Fprintf(tw, "  applied\t%s\t%s → %s\t%s\ttoken %d\t%s\n", stamp(a.GetAppliedAt().AsTime()), a.GetFromState(), a.GetToState(),
					a.GetEventType(), a.GetFencingToken(), printable(a.GetKey()))
			}
		} else if in.entityNF {
			fmt.Fprintf(tw, "  no event of it was applied or holds it yet\n")
		}
		if err := tw.Flush(); err != nil { // the deferred events line up among themselves
			return err
		}
		if len(in.deferred) == 0 {
			fmt.Fprintf(tw, "  no deferred or superseded events\n")
		}
		for _, d := range in.deferred {
			what := "deferred"
			switch {
			case d.GetSuperseded():
				what = "superseded"
			case d.GetApplied():
				what = "deferred, applied since"
			case d.GetLost():
				what = "deferred, LOST (past the provider's retry horizon)"
			case d.GetReady():
				what = "deferred, ready (its next retry applies)"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d×, last %s\t(awaits %s)\n", what, d.GetEventType(), printable(d.GetKey()), d.GetCount(),
				stamp(d.GetLastSeenAt().AsTime()), strings.Join(d.GetAwaiting(), ", "))
		}
	}
	return tw.Flush()
}

// answer names an outcome and, for ACQUIRED, its reason: "ACQUIRED
// LEASE_EXPIRED".
func answer(o pb.Outcome, r pb.Reason) string {
	s := strings.TrimPrefix(o.String(), "OUTCOME_")
	if r != pb.Reason_REASON_UNSPECIFIED {
		s += " " + strings.TrimPrefix(r.String(), "REASON_")
	}
	return s
}

func name(s pb.EventState) string { return strings.TrimPrefix(s.String(), "EVENT_STATE_") }

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

func orNone(s string) string {
	if s == "" {
		return "(none given)"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printable shows a scoped key's separator as " scope ": the U+001F
// between key and scope would vanish on a terminal.
func printable(key string) string {
	k, scope, ok := strings.Cut(key, service.ScopeSeparator)
	if !ok {
		return key
	}
	return k + " scope " + scope
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
