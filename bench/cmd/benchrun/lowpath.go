package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
)

// The path most real receivers take: a few handlers, each doing one event
// at a time (the low-concurrency runs), and deliveries arriving at their
// own pace rather than as fast as the server answers (the open loop).
const (
	// lowCallers is the low-concurrency runs' callers: a receiver's few
	// worker threads.
	lowCallers = 8
	// openLoopShare is the open loop's rate as a share of the naive
	// handler's saturated lifecycle rate measured in the same run.
	openLoopShare = 0.5
	// lowCPUTarget is the most server-side CPU (claimd, Redis and
	// PostgreSQL) a low-concurrency event may cost, in µs.
	lowCPUTarget = 300
)

// lowTargets are the targets the low-concurrency run measures: the no-op
// handler for its floor (Claims only: it answers nothing else), the
// others Claim(start) → SETTLED.
var lowTargets = []string{targetNoop, targetNaive, targetEmbedded, targetClaimd}

// openLoopTargets are the tier modes the open loop measures.
var openLoopTargets = []string{targetEmbedded, targetClaimd}

// serverCounts are what Redis and PostgreSQL had done at one moment.
type serverCounts struct {
	redisCommands, scriptCalls, pgNextXID int64
}

// counts reads the commands Redis has executed (INFO commandstats: a
// script's own calls count as commands too) and the next transaction id
// PostgreSQL will assign (only a transaction that writes takes one, so the
// difference of two readings counts write transactions, exactly and at
// once, unlike pg_stat_database, which backends report up to seconds
// late).
func (b *bench) counts() (serverCounts, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	var c serverCounts
	opts, err := goredis.ParseURL(b.servers.Redis.URL())
	if err != nil {
		return c, err
	}
	rc := goredis.NewClient(opts)
	defer rc.Close()
	info, err := rc.Info(ctx, "commandstats").Result()
	if err != nil {
		return c, err
	}
	c.redisCommands, c.scriptCalls = commandCounts(info)
	conn, err := pgx.Connect(ctx, b.pgURL("postgres"))
	if err != nil {
		return c, err
	}
	defer conn.Close(ctx)
	err = conn.QueryRow(ctx, "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint").Scan(&c.pgNextXID)
	return c, err
}

// commandCounts sums the calls of INFO commandstats, and those of the
// commands that run scripts.
func commandCounts(info string) (commands, scripts int64) {
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || name == line {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "info", "hello", "client|setinfo":
			continue // the harness's own readings and connections
		}
		commands += n
		switch name {
		case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
			scripts += n
		}
	}
	return commands, scripts
}

// counted runs one load and adds what the servers did over it.
func (b *bench) counted(run func() (Result, error)) (Result, error) {
	before, err := b.counts()
	if err != nil {
		return Result{}, fmt.Errorf("reading the servers' counters: %w", err)
	}
	res, err := run()
	if err != nil {
		return Result{}, err
	}
	after, err := b.counts()
	if err != nil {
		return Result{}, fmt.Errorf("reading the servers' counters: %w", err)
	}
	res.RedisCommands = after.redisCommands - before.redisCommands
	res.ScriptCalls = after.scriptCalls - before.scriptCalls
	// Reading the next id assigns none: the difference is the writes.
	res.PGWrites = after.pgNextXID - before.pgNextXID
	return res, nil
}

// runLow measures Claim(start) → SETTLED from lowCallers callers on t (on
// the no-op handler, Claims: a gRPC call at that concurrency), and with
// perf on claimd profiles it.
func (b *bench) runLow(t *target) error {
	sc := scenarioLifecycleStart
	if t.id == targetNoop {
		sc = scenarioNew
	}
	run := b.spec(sc)
	run.callers = lowCallers
	res, err := b.counted(func() (Result, error) { return b.loadWith(t, sc, clientClaimload, run) })
	if err != nil {
		return fmt.Errorf("%d callers: %w", lowCallers, err)
	}
	logf("%-16s low-%d   %-10s %8.0f %s  p50 %6.2fms  p99 %6.2fms  errors %d  cpu %s  redis %d commands  postgres %d writes",
		t.id, lowCallers, clientClaimload, res.Rate, res.Unit, res.P50, res.P99, res.Errors, fmtCPU(res.CPU), res.RedisCommands, res.PGWrites)
	b.report.Low = append(b.report.Low, res)
	if b.opts.perf != "" && t.id == targetClaimd {
		return b.profile(t, sc, run, fmt.Sprintf("%d callers", lowCallers), &res)
	}
	return nil
}

// runOpenLoop measures the lifecycle scenario in an open loop at
// openLoopShare of the naive handler's saturated lifecycle rate, on each
// tier mode, each target started afresh; and, as its floor, the no-op
// handler answering Claims due at as many RPCs a second.
func (b *bench) runOpenLoop() error {
	n := b.report.find(targetNaive, scenarioLifecycle, clientClaimload)
	if n == nil || n.Rate == 0 {
		return nil // the naive handler's rate was not measured
	}
	rate := openLoopShare * n.Rate
	if err := b.settleServers(); err != nil {
		return err
	}
	for _, id := range append([]string{targetNoop}, openLoopTargets...) {
		if !slices.Contains(b.opts.targets, id) {
			continue
		}
		if err := b.openLoop(id, rate); err != nil {
			return fmt.Errorf("open loop on %s: %w", id, err)
		}
		if err := b.settleServers(); err != nil {
			return err
		}
	}
	return nil
}

// lifecycleRPCs is the RPCs of an event of the open loop's scenario.
const lifecycleRPCs = 3

func (b *bench) openLoop(id string, rate float64) error {
	if id == targetNoop { // no store: its floor, at the same RPCs a second
		return b.with(id, "", func(t *target) error { return b.openLoopOn(t, scenarioNew, lifecycleRPCs*rate) })
	}
	// A fresh store: the closed-loop runs' rows are gone (settleServers
	// dropped the database; the embedded data directory goes here).
	db := ""
	if id == targetClaimd {
		db = "openloop"
	} else if err := os.RemoveAll(filepath.Join(b.opts.workDir, id)); err != nil {
		return err
	}
	return b.with(id, db, func(t *target) error { return b.openLoopOn(t, scenarioLifecycle, rate) })
}

// openLoopOn runs scenario in an open loop at rate against the started t,
// and with perf profiles claimd's.
func (b *bench) openLoopOn(t *target, scenario string, rate float64) error {
	id := t.id
	run := b.spec(scenario)
	run.rate = rate
	res, err := b.counted(func() (Result, error) { return b.loadWith(t, scenario, clientClaimload, run) })
	if err != nil {
		return err
	}
	logf("%-16s open     %-10s %8.0f of %.0f %s due  p99 %6.2fms  p99.9 %6.2fms  late %d  errors %d",
		id, clientClaimload, res.Rate, res.Due, res.Unit, res.P99, res.P999, res.Late, res.Errors)
	b.report.OpenLoop = append(b.report.OpenLoop, res)
	if b.opts.perf == "" || id == targetNoop {
		return nil
	}
	label := fmt.Sprintf("open loop at %.0f/s", rate)
	if id != targetClaimd {
		label += ", " + display(displayNames, id)
	}
	return b.profile(t, scenario, run, label, &res)
}

// redisAppendFsync turns Redis's append-only file on, fsync'd on every
// write (appendfsync always), or off again: Powertools keeps its records
// only in Redis, so its runs get the durability claimd's get from
// PostgreSQL's fsync; claimd's runs do not need it (Redis is its cache).
func (b *bench) redisAppendFsync(on bool) error {
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	opts, err := goredis.ParseURL(b.servers.Redis.URL())
	if err != nil {
		return err
	}
	rc := goredis.NewClient(opts)
	defer rc.Close()
	if !on {
		return rc.ConfigSet(ctx, "appendonly", "no").Err()
	}
	if err := rc.ConfigSet(ctx, "appendfsync", "always").Err(); err != nil {
		return err
	}
	if err := rc.ConfigSet(ctx, "appendonly", "yes").Err(); err != nil {
		return err
	}
	// Turning it on rewrites the file from the data set in a child
	// process; the runs start when that is done.
	for {
		info, err := rc.Info(ctx, "persistence").Result()
		if err != nil {
			return err
		}
		if strings.Contains(info, "aof_enabled:1") && strings.Contains(info, "aof_rewrite_in_progress:0") && strings.Contains(info, "aof_rewrite_scheduled:0") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis append-only file not ready: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond): // polling a server we do not control
		}
	}
}
