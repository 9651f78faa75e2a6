package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/chaos"
)

// Modes of a scenario: the tiers under the replicas.
const (
	modeProduction = "redis+postgres"
	modeEmbedded   = "embedded"
)

// scenario is one fault injected once, mid-load.
type scenario struct {
	name  string
	mode  string
	fault string // what is done, for the report
	// inject performs the fault and returns when it is over (the restart
	// done, the window closed); start and end bound it.
	inject func(ctx context.Context, e *env) (start, end time.Time, err error)
	// proxy puts the reply-losing proxy before r0.
	proxy bool
	// lifecycle drives entity events (lifecycle.go) instead of the claim
	// register's load.
	lifecycle bool
}

// The faults, each of which one or more scenarios inject.
var (
	faultFlush = "Redis FLUSHALL, twice"
	faultKill  = "Redis kill -9, restarted empty"
	faultStop  = "PostgreSQL immediate stop (SIGQUIT to the postmaster), restarted with crash recovery, twice"
	faultR1    = "kill -9 of replica r1, restarted"
	faultShort = "client deadlines of 0.1–3 ms (replies lost after commit)"
	faultLost  = "proxy before r0 swallows 20% of replies after the server sent them, closing the connection"
	faultForge = "Redis records forged while the load runs: settled with another result, copied from another key, a later token and holder"
)

// scenarios lists every scenario in run order.
func scenarios() []scenario {
	now := func() (time.Time, time.Time, error) { t := time.Now(); return t, t, nil }
	window := func(e *env, on, off func()) (time.Time, time.Time, error) {
		start := time.Now()
		on()
		sleep(e.ctx, e.hold)
		off()
		return start, time.Now(), nil
	}
	flushRedis := func(ctx context.Context, e *env) (time.Time, time.Time, error) {
		start := time.Now()
		if err := e.b.flushRedis(ctx); err != nil {
			return start, start, err
		}
		sleep(ctx, e.hold)
		return start, time.Now(), e.b.flushRedis(ctx)
	}
	killRedis := func(ctx context.Context, e *env) (time.Time, time.Time, error) {
		start := time.Now()
		if err := e.b.servers.Redis.Crash(syscall.SIGKILL); err != nil {
			return start, start, err
		}
		sleep(ctx, e.hold)
		return start, time.Now(), e.b.servers.Redis.Restart()
	}
	stopPostgres := func(ctx context.Context, e *env) (time.Time, time.Time, error) {
		start := time.Now()
		for i := range 2 {
			if i > 0 {
				sleep(ctx, e.hold/2)
			}
			if err := e.b.servers.Postgres.Crash(syscall.SIGQUIT); err != nil {
				return start, time.Now(), err
			}
			sleep(ctx, e.hold/2)
			if err := e.b.servers.Postgres.Restart(); err != nil {
				return start, time.Now(), err
			}
		}
		return start, time.Now(), nil
	}
	killReplica := func(ctx context.Context, e *env) (time.Time, time.Time, error) {
		start := time.Now()
		if err := e.replicas[1].kill(); err != nil {
			return start, start, err
		}
		sleep(ctx, e.hold)
		err := e.replicas[1].start(ctx)
		return start, time.Now(), err
	}
	shortDeadlines := func(ctx context.Context, e *env) (time.Time, time.Time, error) {
		return window(e, func() { e.load.short.Store(int64(3 * time.Millisecond)) }, func() { e.load.short.Store(0) })
	}
	loseReplies := func(ctx context.Context, e *env) (time.Time, time.Time, error) {
		return window(e, func() { e.proxy.SetDropRate(0.2) }, func() { e.proxy.SetDropRate(0) })
	}
	forgeRedis := func(ctx context.Context, e *env) (time.Time, time.Time, error) {
		start := time.Now()
		_, err := e.b.forgeRedis(ctx, e.hold)
		return start, time.Now(), err
	}
	return []scenario{
		{name: "baseline", mode: modeProduction, fault: "none",
			inject: func(context.Context, *env) (time.Time, time.Time, error) { return now() }},
		{name: "redis-flushall", mode: modeProduction, fault: faultFlush, inject: flushRedis},
		{name: "redis-kill", mode: modeProduction, fault: faultKill, inject: killRedis},
		{name: "postgres-stop", mode: modeProduction, fault: faultStop, inject: stopPostgres},
		{name: "replica-kill", mode: modeProduction, fault: faultR1, inject: killReplica},
		{name: "short-deadlines", mode: modeProduction, fault: faultShort, inject: shortDeadlines},
		{name: "lost-replies", mode: modeProduction, fault: faultLost, inject: loseReplies, proxy: true},
		{name: "redis-forgery", mode: modeProduction, fault: faultForge, inject: forgeRedis},
		{name: "lifecycle-replica-kill", mode: modeProduction, fault: faultR1, inject: killReplica, lifecycle: true},
		{name: "lifecycle-postgres-stop", mode: modeProduction, fault: faultStop, inject: stopPostgres, lifecycle: true},
		{name: "lifecycle-redis-flushall", mode: modeProduction, fault: faultFlush, inject: flushRedis, lifecycle: true},
		{name: "lifecycle-lost-replies", mode: modeProduction, fault: faultLost, inject: loseReplies, proxy: true, lifecycle: true},
		{name: "embedded-kill", mode: modeEmbedded, fault: "kill -9 of the one claimd, restarted on the same data dir, twice",
			inject: func(ctx context.Context, e *env) (time.Time, time.Time, error) {
				start := time.Now()
				for i := range 2 {
					if i > 0 {
						sleep(ctx, e.hold/2)
					}
					if err := e.replicas[0].kill(); err != nil {
						return start, start, err
					}
					if err := e.replicas[0].start(ctx); err != nil {
						return start, time.Now(), err
					}
				}
				return start, time.Now(), nil
			}},
		{name: "embedded-short-deadlines", mode: modeEmbedded, fault: faultShort, inject: shortDeadlines},
	}
}

// env is one scenario's world: its replicas, the load and the servers.
type env struct {
	ctx      context.Context
	b        *backends
	replicas []*replica
	targets  []*target // what the load calls (r0 may be behind the proxy)
	direct   []*target // every replica directly, for the final probes
	proxy    *chaos.Proxy
	extra    *target // the load's connection through the proxy
	load     *load
	hold     time.Duration // how long a fault lasts
	dataDir  string        // embedded
	dbURL    string        // production
}

// scenarioResult is what the report prints for one scenario.
type scenarioResult struct {
	Name, Mode, Fault string
	Keys, Calls       int
	Errors            map[string]int
	Violations        []chaos.Violation
	Check             chaos.Result
	Recover           time.Duration // -1: no fault, or no failure after it
	Dropped           int64
	Lifecycle         *chaos.LifecycleResult // a lifecycle scenario's model
	Took              time.Duration
	Err               string // the scenario could not run
}

// runScenario sets up sc's world, drives the load with the fault in its
// middle, probes every key on every replica and checks the history.
func (s *suite) runScenario(sc scenario) (res scenarioResult) {
	res = scenarioResult{Name: sc.name, Mode: sc.mode, Fault: sc.fault, Recover: -1}
	began := time.Now()
	defer func() { res.Took = time.Since(began) }()
	e, err := s.setup(sc)
	if e != nil {
		defer e.teardown()
	}
	if err != nil {
		res.Err = err.Error()
		return res
	}
	cfg := loadConfig{
		prefix: sc.name, groups: s.opts.groups, racers: s.opts.racers, maxKeys: s.opts.maxKeys,
		releaseRate: s.opts.releaseRate, callTimeout: 3 * time.Second,
	}
	var ll *lifecycleLoad
	if sc.lifecycle {
		cfg.provider = lifecycleProvider
		ll = newLifecycleLoad(cfg, e.targets, s.lifecycles)
		e.load = ll.load
	} else {
		e.load = newLoad(cfg, e.targets)
	}

	stopKeys, cancelKeys := context.WithTimeout(s.ctx, s.opts.duration)
	defer cancelKeys()
	// The callers' bound: converge after the load and the fault have both
	// ended (a PostgreSQL crash recovery may outlast the load on a busy
	// machine), set once the fault is over.
	loadEnd := time.Now().Add(s.opts.duration)
	hard, cancelHard := context.WithCancel(s.ctx)
	defer cancelHard()
	done := make(chan struct{})
	go func() {
		if ll != nil {
			ll.run(stopKeys, hard)
		} else {
			e.load.run(stopKeys, hard)
		}
		close(done)
	}()

	sleep(s.ctx, s.opts.duration/3)
	logf("%s: %s", sc.name, sc.fault)
	fstart, fend, ferr := sc.inject(s.ctx, e)
	if fend.After(loadEnd) {
		loadEnd = fend
	}
	bound := time.AfterFunc(time.Until(loadEnd.Add(s.opts.converge)), cancelHard)
	defer bound.Stop()
	if ferr != nil {
		res.Err = "fault: " + ferr.Error()
	}
	<-done
	logf("%s: load done (%d keys); probing every key on every replica", sc.name, e.load.keys())
	if ll != nil {
		ll.probe(s.ctx, e.direct)
	} else {
		e.probe(s.ctx)
	}
	if e.proxy != nil {
		res.Dropped = e.proxy.Dropped()
	}
	for _, r := range e.replicas {
		if err := r.stop(); err != nil {
			logf("%s: %v", sc.name, err)
		}
	}

	grants, aerr := e.readAudit(s.ctx, sc.mode)
	if aerr != nil {
		logf("%s: audit log not read: %v", sc.name, aerr)
	}
	ops := e.load.h.Ops()
	e.load.mu.Lock()
	unfinished := append([]string(nil), e.load.unfinished...)
	e.load.mu.Unlock()
	names := make([]string, len(e.direct))
	for i, t := range e.direct {
		names[i] = t.name
	}
	res.Check = chaos.Check(chaos.Input{
		Ops: ops, Grants: grants, Unfinished: unfinished, Replicas: names,
		VizDir: filepath.Join(s.opts.vizDir, sc.name),
	})
	res.Violations = res.Check.Violations
	if ll != nil {
		lr := chaos.CheckLifecycles(chaos.LifecycleInput{
			Ops: ops, Events: ll.events, Reads: ll.reads, Lifecycles: s.lifecycles,
			Orphaned: res.Check.Orphaned, Replicas: names,
		})
		res.Violations = append(lr.Excuse(res.Violations), lr.Violations...)
		res.Lifecycle = &lr
	}
	if err := writeHistories(filepath.Join(s.opts.vizDir, sc.name), ops, res.Violations); err != nil {
		logf("%s: writing histories: %v", sc.name, err)
	}
	if aerr != nil {
		res.Violations = append(res.Violations, chaos.Violation{Check: chaos.CheckAudit, Key: "-", Detail: "audit log not read: " + aerr.Error()})
	}
	res.Keys, res.Calls = e.load.keys(), len(ops)
	if ll != nil {
		res.Keys = len(ll.events)
	}
	res.Errors = map[string]int{}
	var lastErr int64
	for _, o := range ops {
		if !o.Answered() && !o.Cutoff {
			res.Errors[o.Code.String()]++
			if !o.Probe && o.Complete > lastErr {
				lastErr = o.Complete
			}
		}
	}
	if sc.fault != "none" && ferr == nil {
		res.Recover = max(0, time.Duration(lastErr-fend.UnixNano()))
		if lastErr < fstart.UnixNano() {
			res.Recover = 0
		}
	}
	if o := res.Check.Orphaned; len(o) > 0 {
		logf("%s: held by an orphaned grant until its lease ends: %v", sc.name, o)
	}
	if lr := res.Lifecycle; lr != nil {
		logf("%s: %d entities, %d events: %d applied, %d superseded, %d waiting, %d DEFERRED answers, %d ready rows seen, %d reads",
			sc.name, lr.Entities, lr.Events, lr.Applied, lr.Superseded, lr.Waiting, lr.DeferredAnswers, lr.ReadyRows, lr.Reads)
	}
	logf("%s: %d keys, %d calls, %d violations", sc.name, res.Keys, res.Calls, len(res.Violations))
	for i, v := range res.Violations {
		if i == 20 {
			break
		}
		logf("%s: %s", sc.name, v)
	}
	return res
}

// setup starts the replicas of sc (and the proxy), on fresh data.
func (s *suite) setup(sc scenario) (*env, error) {
	e := &env{ctx: s.ctx, b: s.backends, hold: max(time.Second, s.opts.duration/6)}
	dir := filepath.Join(s.opts.workDir, sc.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "providers.yaml"), s.providers, 0o644); err != nil {
		return nil, err
	}
	var tierArgs []string
	n := s.opts.replicas
	switch sc.mode {
	case modeProduction:
		if err := s.backends.flushRedis(s.ctx); err != nil {
			return nil, err
		}
		url, err := s.backends.createDatabase(s.ctx, dbName(sc.name))
		if err != nil {
			return nil, err
		}
		e.dbURL = url
		keyFile, err := writeFastKey(dir)
		if err != nil {
			return nil, err
		}
		tierArgs = []string{"--redis-url", s.backends.servers.Redis.URL(), "--fast-tier-key-file", keyFile, "--postgres-url", url}
	case modeEmbedded:
		n = 1
		e.dataDir = filepath.Join(dir, "data")
		tierArgs = []string{"--data-dir", e.dataDir}
	}
	for i := range n {
		r, err := newReplica(fmt.Sprintf("r%d", i), s.claimd, dir, tierArgs)
		if err != nil {
			return e, err
		}
		e.replicas = append(e.replicas, r)
		if err := r.start(s.ctx); err != nil {
			return e, err
		}
		t, err := dial(r.name, r.addr)
		if err != nil {
			return e, err
		}
		e.direct = append(e.direct, t)
	}
	e.targets = append([]*target(nil), e.direct...)
	if sc.proxy {
		p, err := chaos.NewProxy(e.replicas[0].addr)
		if err != nil {
			return e, err
		}
		e.proxy = p
		t, err := dial(e.replicas[0].name, p.Addr())
		if err != nil {
			return e, err
		}
		e.targets[0], e.extra = t, t
	}
	return e, nil
}

func dbName(scenario string) string {
	b := []byte("chaos_" + scenario)
	for i, c := range b {
		if c == '-' {
			b[i] = '_'
		}
	}
	return string(b)
}

// teardown stops whatever setup started, by PID.
func (e *env) teardown() {
	for _, t := range append(e.direct, e.extra) {
		if t != nil {
			t.cc.Close()
		}
	}
	if e.proxy != nil {
		e.proxy.Close()
	}
	for _, r := range e.replicas {
		if err := r.stop(); err != nil {
			logf("%v", err)
		}
	}
}

// probe asks every replica about every key, one replica after the other,
// with a fresh delivery each time. A failed call or an IN_PROGRESS is asked
// again for a short while: a leftover marker or a replica still reconnecting
// may answer so; what it answers last is what the checks judge.
func (e *env) probe(ctx context.Context) {
	l := e.load
	keys := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for k := range keys {
				for _, t := range e.direct {
					client := int(l.clients.Add(1))
					for i := 0; ; i++ {
						op, _ := l.claimOn(ctx, t, client, k, fmt.Sprintf("probe-%s-%d-%d", t.name, client, i), true)
						settled := op.Code == codes.OK && op.Outcome == pb.Outcome_OUTCOME_DUPLICATE
						if settled || i >= 20 || ctx.Err() != nil {
							break
						}
						sleep(ctx, 100*time.Millisecond) // polling for convergence
					}
				}
			}
		})
	}
	for i := 1; i <= l.keys(); i++ {
		keys <- fmt.Sprintf("%s-%05d", l.cfg.prefix, i)
	}
	close(keys)
	wg.Wait()
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// sortedCodes renders errors by code.
func sortedCodes(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	s := ""
	for i, k := range ks {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %d", k, m[k])
	}
	return s
}

// writeHistories writes the calls of every key with a violation to
// <dir>/<key>.txt, one call a line in invoke order, beside porcupine's
// visualization: what a reader needs to see why the key failed.
func writeHistories(dir string, ops []chaos.Op, vs []chaos.Violation) error {
	bad := map[string]bool{}
	for _, v := range vs {
		bad[v.Key] = true
	}
	if len(bad) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	lines := map[string][]string{}
	var t0 int64
	for _, o := range ops {
		if t0 == 0 || o.Invoke < t0 {
			t0 = o.Invoke
		}
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Invoke < ops[j].Invoke })
	for _, o := range ops {
		if !bad[o.Key] {
			continue
		}
		tag := ""
		if o.Probe {
			tag = " (probe)"
		}
		lines[o.Key] = append(lines[o.Key], fmt.Sprintf("%12.3fms %12.3fms c%-5d %-3s %s%s",
			float64(o.Invoke-t0)/1e6, float64(o.Complete-t0)/1e6, o.Client, o.Replica, o.String(), tag))
	}
	for _, v := range vs {
		lines[v.Key] = append(lines[v.Key], "VIOLATION "+v.String())
	}
	for k, ls := range lines {
		name := filepath.Join(dir, chaos.FileName(k)+".txt")
		if err := os.WriteFile(name, []byte(strings.Join(ls, "\n")+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}
