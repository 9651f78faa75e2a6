package redis

import (
	"context"

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
	queue  *tiers.Queue[*scriptCall]
}

// scriptCall is one script run waiting in the coalescer.
type scriptCall struct {
	ctx    context.Context
	script *goredis.Script
	keys   []string
	args   []any
	cmd    *goredis.Cmd // the answer, once done is closed
	alone  bool         // NOSCRIPT in the pipeline: the caller runs it itself (EVAL)
	done   chan struct{}
}

func newCoalescer(client goredis.UniversalClient) *coalescer {
	c := &coalescer{client: client, queue: tiers.NewQueue[*scriptCall](4 * maxPipeline)}
	c.queue.Start(1, maxPipeline, c.flush)
	return c
}

// close stops the flusher once the queue is drained.
func (c *coalescer) close() { c.queue.Close() }

// run runs script like script.Run, through the next pipeline.
func (c *coalescer) run(ctx context.Context, script *goredis.Script, keys []string, args ...any) *goredis.Cmd {
	if err := ctx.Err(); err != nil {
		cmd := goredis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	q := &scriptCall{ctx: ctx, script: script, keys: keys, args: args, done: make(chan struct{})}
	if !c.queue.TryEnqueue(q) {
		return script.Run(ctx, c.client, keys, args...)
	}
	select {
	case <-q.done:
		if q.alone {
			// Redis answered NOSCRIPT for it in the pipeline: send the
			// script itself, as script.Run would after its own EVALSHA.
			return script.Eval(ctx, c.client, keys, args...)
		}
		return q.cmd
	case <-ctx.Done():
		// The script may still go out with its pipeline, as it may when a
		// context ends during a plain call: every script is safe either
		// way (put.lua by version, reserve.lua and abort.lua by nonce).
		cmd := goredis.NewCmd(ctx)
		cmd.SetErr(ctx.Err())
		return cmd
	}
}

// flush sends batch and answers its callers.
func (c *coalescer) flush(batch []*scriptCall) {
	live := batch[:0:0]
	var deadline tiers.LatestDeadline
	for _, q := range batch {
		if err := q.ctx.Err(); err != nil {
			// Gone before its pipeline: nothing is sent for it.
			q.cmd = goredis.NewCmd(q.ctx)
			q.cmd.SetErr(err)
			close(q.done)
			continue
		}
		live = append(live, q)
		deadline.Add(q.ctx)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		// Alone: exactly the plain call, on the caller's context.
		q := live[0]
		q.cmd = q.script.Run(q.ctx, c.client, q.keys, q.args...)
		close(q.done)
		return
	}
	// The pipeline outlives any one caller, bounded by the latest deadline
	// among them (and by the client's read and write timeouts).
	ctx, cancel := deadline.Context(0)
	defer cancel()
	pipe := c.client.Pipeline()
	cmds := make([]*goredis.Cmd, len(live))
	for i, q := range live {
		cmds[i] = pipe.EvalSha(ctx, q.script.Hash(), q.keys, q.args...)
	}
	pipe.Exec(ctx) // each command carries its own error
	for i, q := range live {
		q.cmd = cmds[i]
		if err := q.cmd.Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
			q.alone = true
		}
		close(q.done)
	}
}
