// Command fxreceiver is the Go client's receiver for effectspec, the crash
// and zombie driver (clients/guardspec/README.md, "Effect processes"). It
// guards deliveries of provider stripe by event id with Client.Guard and
// writes one ledger row per delivery through claimd.Effect, in the
// database effectspec names:
//
//	fxreceiver --claimd ADDR --namespace NS --db sqlite:PATH|postgres://URL
//
// It reads one JSON object per line on standard input ({"deliver": ID,
// "lease_ms": N, "wait_ms": N, "gate": G?, "raise": true?} and {"go": ID}),
// handles each delivery in a goroutine of its own, and writes its ready
// line, gate lines and answers on standard output, one write per line. It
// logs to standard error and exits when standard input closes, after
// answering the deliveries under way.
//
// --unfenced writes the ledger row outside the effect's transaction: a
// receiver that is wrong on purpose, so that the Go client's test can show
// effectspec failing it. It needs PostgreSQL (on SQLite the write would
// queue behind the effect's own write lock).
package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	_ "modernc.org/sqlite"             // registers "sqlite"

	"github.com/claimd/claimd/clients/go/claimd"
)

// Gates where a delivery may stop and wait for its "go".
const (
	gateBeforeEffect = "before_effect"
	gateInEffect     = "in_effect"
	gateAfterCommit  = "after_commit"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fxreceiver:", err)
		os.Exit(1)
	}
}

// command is one line of standard input.
type command struct {
	Deliver *string `json:"deliver"`
	LeaseMS int64   `json:"lease_ms"`
	WaitMS  int64   `json:"wait_ms"`
	Gate    string  `json:"gate"`
	Raise   bool    `json:"raise"`
	Go      *string `json:"go"`
}

// receiver is what every delivery shares.
type receiver struct {
	client    *claimd.Client
	db        *sql.DB
	namespace string
	insert    string // the ledger insert in the database's dialect
	unfenced  bool   // write the ledger outside the effect (--unfenced)
	writer    string // this process's PID, the ledger's writer
	out       *lines
	gates     gates
	log       *slog.Logger
}

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("fxreceiver", flag.ContinueOnError)
	addr := fs.String("claimd", "", "claimd's gRPC address")
	ns := fs.String("namespace", "", "the namespace of every delivery")
	dbArg := fs.String("db", "", "sqlite:PATH or a postgres:// URL")
	unfenced := fs.Bool("unfenced", false, "write the ledger outside the effect's transaction (a broken receiver, for tests)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *addr == "" || *ns == "" || *dbArg == "" {
		return errors.New("--claimd, --namespace and --db are required")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx := context.Background()

	db, insert, err := openDB(*dbArg)
	if err != nil {
		return err
	}
	defer db.Close()
	client, err := claimd.Dial(ctx, *addr, claimd.WithLogger(log))
	if err != nil {
		return err
	}
	defer client.Close()

	r := &receiver{
		client: client, db: db, namespace: *ns, insert: insert, unfenced: *unfenced,
		writer: strconv.Itoa(os.Getpid()), out: &lines{w: stdout}, log: log,
		gates: gates{m: map[string]chan struct{}{}},
	}
	if err := r.out.write(map[string]bool{"ready": true}); err != nil {
		return err
	}
	var wg sync.WaitGroup
	in := bufio.NewScanner(stdin)
	in.Buffer(make([]byte, 64<<10), 1<<20)
	for in.Scan() {
		var c command
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			log.Error("fxreceiver: a line that is not a command", "line", in.Text(), "err", err)
			continue
		}
		switch {
		case c.Deliver != nil:
			wg.Go(func() { r.deliver(ctx, *c.Deliver, c) })
		case c.Go != nil:
			r.gates.release(*c.Go)
		default:
			log.Error("fxreceiver: a line that is neither deliver nor go", "line", in.Text())
		}
	}
	wg.Wait() // answer what is under way, then exit
	return in.Err()
}

// openDB opens -db with the driver a Go service would use and returns the
// ledger's insert in its dialect.
func openDB(s string) (*sql.DB, string, error) {
	const insert = "INSERT INTO guardspec_ledger (namespace, key, writer) VALUES "
	switch {
	case strings.HasPrefix(s, "sqlite:"):
		// A writer queued behind another's BEGIN IMMEDIATE waits for the
		// lock (up to the busy timeout) instead of failing at once.
		q := url.Values{"_pragma": {"busy_timeout(30000)", "journal_mode(WAL)"}}
		db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: strings.TrimPrefix(s, "sqlite:")}).EscapedPath()+"?"+q.Encode())
		return db, insert + "(?, ?, ?)", err
	case strings.HasPrefix(s, "postgres://"), strings.HasPrefix(s, "postgresql://"):
		db, err := sql.Open("pgx", s)
		return db, insert + "($1, $2, $3)", err
	}
	return nil, "", fmt.Errorf("--db %q: want sqlite:PATH or a postgres:// URL", s)
}

// deliver guards one delivery and writes its answer.
func (r *receiver) deliver(ctx context.Context, id string, c command) {
	req := claimd.ClaimRequest{
		Namespace: r.namespace, Provider: "stripe", EventID: id,
		Lease: time.Duration(c.LeaseMS) * time.Millisecond,
		Wait:  time.Duration(c.WaitMS) * time.Millisecond,
	}
	result, err := json.Marshal(map[string]string{"event": id})
	if err != nil {
		panic(err)
	}
	o := r.client.Guard(ctx, req, func(ctx context.Context, cl claimd.Claim) ([]byte, error) {
		r.gate(id, c.Gate, gateBeforeEffect)
		fx, err := claimd.Effect(ctx, r.db, func(ctx context.Context, tx claimd.EffectTx, fx *claimd.Fx) error {
			var w claimd.EffectTx = tx
			if r.unfenced {
				w = r.db
			}
			if _, err := w.ExecContext(ctx, r.insert, r.namespace, cl.GetKey(), r.writer); err != nil {
				return err
			}
			fx.Result = result
			r.gate(id, c.Gate, gateInEffect)
			if c.Raise {
				return errors.New("fxreceiver: raised inside the effect, as asked")
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		r.gate(id, c.Gate, gateAfterCommit)
		return fx.Result, nil
	})
	if o.Err != nil {
		r.log.Info("fxreceiver: delivery", "event", id, "status", o.Status, "disposition", o.Disposition, "err", o.Err)
	}
	err = r.out.write(struct {
		Event  string `json:"event"`
		Status int    `json:"status"`
		Body   string `json:"body"`
		Done   bool   `json:"done"`
	}{id, o.Status, string(o.Body), o.Effect != nil && o.Effect.Done})
	if err != nil {
		r.log.Error("fxreceiver: writing an answer", "event", id, "err", err)
	}
}

// gate stops the delivery at point when it is the delivery's gate: it says
// so on standard output and waits for the event's "go".
func (r *receiver) gate(id, gate, point string) {
	if gate != point {
		return
	}
	ch := r.gates.get(id)
	if err := r.out.write(map[string]string{"event": id, "at": point}); err != nil {
		r.log.Error("fxreceiver: writing a gate line", "event", id, "err", err)
	}
	<-ch
}

// gates holds one channel per event, closed by its "go"; a "go" that comes
// before the delivery reaches its gate is kept.
type gates struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

func (g *gates) get(id string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch, ok := g.m[id]
	if !ok {
		ch = make(chan struct{})
		g.m[id] = ch
	}
	return ch
}

func (g *gates) release(id string) {
	ch := g.get(id)
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-ch: // a second "go"
	default:
		close(ch)
	}
}

// lines writes one JSON object per line, each in one write under a mutex,
// so that lines of concurrent deliveries never interleave.
type lines struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lines) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err = l.w.Write(append(b, '\n'))
	return err
}
