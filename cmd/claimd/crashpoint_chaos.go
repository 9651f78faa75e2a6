//go:build chaos

package main

import (
	"context"
	"os"
	"strings"
	"syscall"

	"github.com/claimd/claimd/internal/server"
	"github.com/claimd/claimd/internal/tiers"
)

// This file is compiled only into the fault suite's claimd (go build -tags
// chaos, by scripts/chaos.sh); a production build has the no-op of
// crashpoint.go. It kills the process at a named point of one key's call,
// which no external signal can hit reliably:
//
//	CLAIMD_CHAOS_CRASH=<point>:<key>
//
//	reserve            the fast tier placed the pending marker; nothing durable yet
//	claim-commit       the durable tier committed an ACQUIRED claim; no fast-tier copy, no reply
//	transition-commit  the durable tier committed a terminal Transition; no fast-tier refresh, no reply
//	release-commit     the durable tier committed a Release; no fast-tier refresh, no reply
//	entity-settle-before  inside an entity settle's transaction, before the entity row's update
//	entity-settle-after   inside it, the entity row updated, before the commit
//
// The kill is SIGKILL to itself: no deferred function, drain or flush runs,
// as with kill -9 from outside.
const crashEnv = "CLAIMD_CHAOS_CRASH"

// withCrashPoints plugs the crash points into the tiers c opens: the
// wrappers around the fast and durable tier, and the steps inside the
// durable tiers' transactions.
func withCrashPoints(c *server.TierConfig) {
	c.Wrap, c.Step = crashPoints, crashStep()
}

func crashPoints(f tiers.Fast, d tiers.Durable) (tiers.Fast, tiers.Durable) {
	point, key, ok := strings.Cut(os.Getenv(crashEnv), ":")
	if !ok {
		return f, d
	}
	c := crasher{point: point, key: key}
	cd := &crashDurable{Durable: d, c: c}
	if r, ok := d.(reads); ok {
		// Keep the reads (EntityService, InspectService, the deferred
		// gauges) that a bare wrapper would hide from twotier's type
		// assertions.
		return &crashFast{Fast: f, c: c}, struct {
			*crashDurable
			reads
		}{cd, r}
	}
	return &crashFast{Fast: f, c: c}, cd
}

// reads are the durable tiers' reads beside the Store.
type reads interface {
	tiers.Entities
	tiers.Inspector
}

// crashStep returns the durable tiers' Config.Step: the points inside an
// entity settle's transaction (the entity-settle-* above), or nil.
func crashStep() func(string, tiers.Key) {
	point, key, ok := strings.Cut(os.Getenv(crashEnv), ":")
	if !ok || !strings.HasPrefix(point, "entity-settle-") {
		return nil
	}
	return crasher{point: point, key: key}.at
}

type crasher struct{ point, key string }

func (c crasher) at(point string, k tiers.Key) {
	if point == c.point && k.Key == c.key {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way; nothing after this point runs
	}
}

type crashFast struct {
	tiers.Fast
	c crasher
}

func (f *crashFast) Reserve(ctx context.Context, p tiers.ReserveParams) (tiers.FastResult, error) {
	r, err := f.Fast.Reserve(ctx, p)
	if err == nil && r.Verdict == tiers.FastReserved {
		f.c.at("reserve", p.Key)
	}
	return r, err
}

type crashDurable struct {
	tiers.Durable
	c crasher
}

func (d *crashDurable) Claim(ctx context.Context, p tiers.ClaimParams) (tiers.ClaimResult, error) {
	r, err := d.Durable.Claim(ctx, p)
	if err == nil && r.Outcome == tiers.OutcomeAcquired {
		d.c.at("claim-commit", p.Key)
	}
	return r, err
}

func (d *crashDurable) Transition(ctx context.Context, p tiers.TransitionParams) (tiers.Record, bool, error) {
	rec, changed, err := d.Durable.Transition(ctx, p)
	if err == nil && changed && rec.State.Terminal() {
		d.c.at("transition-commit", p.Key)
	}
	return rec, changed, err
}

func (d *crashDurable) Release(ctx context.Context, p tiers.ReleaseParams) (tiers.Record, error) {
	rec, err := d.Durable.Release(ctx, p)
	if err == nil {
		d.c.at("release-commit", p.Key)
	}
	return rec, err
}
