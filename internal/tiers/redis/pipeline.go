package redis

import (
	"context"
	"errors"

	goredis "github.com/redis/go-redis/v9"

	"github.com/claimd/claimd/internal/tiers"
)

// maxPipeline bounds the scripts of one pipeline.
const maxPipeline = 128

// coalescer sends the scripts of concurrent callers to Redis as one
// pipeline: one write and one read of the connection for all of them, where
// each alone costs a write and a read of its own (system calls on both
// sides, Redis's included). One flusher sends a pipeline at a time; the
// calls that arrive meanwhile queue and form the next one, so a pipeline
// grows with the load and a lone call goes out at once. There is no timer.
//
// It keeps what go-redis's experimental AutoPipeline did not: a caller
// whose context is done before its pipeline goes out sends nothing, and a
// call alone runs on its own context, exactly as without the coalescer. A
// pipeline that fails on the network fails only its own calls (go-redis
// retries it once, as it retries a single call); the calls queued behind
// it go out in the next pipeline, on a new connection, as they would have
// alone. (Failing them with it, to spare a hung Redis's timeouts, dropped
// fast-tier repairs after a Redis restart: make chaos, redis-kill.)
type coalescer struct {
	client goredis.UniversalClient
	queue  *tiers.Queue[scriptRun, *goredis.Cmd]
}

// scriptRun is one script run, what script.Run takes; or, with no script,
// one plain command, args its every word.
type scriptRun struct {
	script *goredis.Script
	keys   []string
	args   []any
}

// send adds r to pipe.
func (r scriptRun) send(ctx context.Context, pipe goredis.Pipeliner) *goredis.Cmd {
	if r.script == nil {
		return pipe.Do(ctx, r.args...)
	}
	return pipe.EvalSha(ctx, r.script.Hash(), r.keys, r.args...)
}

// runAlone sends r on its own, as it would go without the coalescer.
func (r scriptRun) runAlone(ctx context.Context, client goredis.UniversalClient) *goredis.Cmd {
	if r.script == nil {
		return client.Do(ctx, r.args...)
	}
	return r.script.Run(ctx, client, r.keys, r.args...)
}

// scriptCall is one caller's script run, as the flusher sees it.
type scriptCall = tiers.Call[scriptRun, *goredis.Cmd]

// newCoalescer returns a started coalescer. A caller that leaves once its
// script was taken returns at once (tiers.LeaveAtOnce): the script may
// still go out with its pipeline, as it may when a context ends during a
// plain call, and every script is safe either way (put.lua by version,
// reserve.lua and abort.lua by nonce).
func newCoalescer(client goredis.UniversalClient) *coalescer {
	c := &coalescer{client: client, queue: tiers.NewQueue[scriptRun, *goredis.Cmd](4*maxPipeline, tiers.LeaveAtOnce)}
	c.queue.Start(1, maxPipeline, c.flush)
	return c
}

// close stops the flusher once the queue is drained.
func (c *coalescer) close() { c.queue.Close() }

// run runs script like script.Run, or with a nil script the command args
// like Do, through the next pipeline.
func (c *coalescer) run(ctx context.Context, script *goredis.Script, keys []string, args ...any) *goredis.Cmd {
	r := scriptRun{script: script, keys: keys, args: args}
	cmd, err := c.queue.TrySubmit(ctx, r)
	switch {
	case errors.Is(err, tiers.ErrNotQueued):
		return r.runAlone(ctx, c.client)
	case err != nil:
		// Gone before its pipeline, or while it was out.
		cmd = goredis.NewCmd(ctx)
		cmd.SetErr(err)
	case isNoScript(cmd.Err()):
		// Redis answered NOSCRIPT for it in the pipeline: send the script
		// itself, as script.Run would after its own EVALSHA.
		return script.Eval(ctx, c.client, keys, args...)
	}
	return cmd
}

// isNoScript reports whether err is Redis's answer to an EVALSHA of a
// script it does not hold.
func isNoScript(err error) bool { return err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") }

// flush sends batch and answers its callers. A caller whose context is
// done before its pipeline goes out is not in it (tiers.Queue): nothing is
// sent for it.
func (c *coalescer) flush(batch []*scriptCall) {
	if len(batch) == 1 {
		// Alone: exactly the plain call, on the caller's context.
		q := batch[0]
		q.Answer(q.Item.runAlone(q.Context(), c.client), nil)
		return
	}
	// The pipeline outlives any one caller, bounded by the latest deadline
	// among them (and by the client's read and write timeouts).
	ctx, cancel := tiers.BatchContext(batch, 0)
	defer cancel()
	pipe := c.client.Pipeline()
	cmds := make([]*goredis.Cmd, len(batch))
	for i, q := range batch {
		cmds[i] = q.Item.send(ctx, pipe)
	}
	pipe.Exec(ctx) // each command carries its own error
	for i, q := range batch {
		q.Answer(cmds[i], nil)
	}
}
