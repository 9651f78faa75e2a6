package tiers

import "runtime"

// Batches runs the group-commit loop the backends share (PostgreSQL's claim
// and write batchers, SQLite's committer, Redis's script coalescer): it
// takes the first request off queue, adds whatever else is already queued
// (up to max), hands the batch to flush, and starts over, until queue is
// closed and drained. A batch is whatever queued while the previous one was
// in flight; no timer ever holds a request back. The slice flush gets is
// reused: flush must not keep it, and its references are cleared after
// flush returns so answered callers can be collected.
//
// Before it sends a batch, the loop yields its processor (runtime.Gosched)
// to the goroutines that are already runnable, and takes what they queue
// meanwhile; it yields again as long as a yield brings more, up to max.
// Those goroutines were woken by the previous batch's answers or by their
// callers' requests and are about to queue: without the yield, the first
// of them went out alone, a whole round trip and commit for one request,
// while the rest queued behind it. Under a closed loop of 50 callers half
// of PostgreSQL's batches were of one claim; with the yield a lifecycle
// event cost a sixth less CPU (claimd, Redis and PostgreSQL together) and
// ran 13 % faster (bench/NOTES.md). A yield holds a batch back only while
// others run that would have run anyway, and when nothing else is runnable
// it returns at once: a lone request on a quiet server still goes out
// immediately.
func Batches[T any](queue <-chan T, max int, flush func(batch []T)) {
	batches(queue, max, flush, runtime.Gosched)
}

// batches is Batches with yield in place of runtime.Gosched (tests).
func batches[T any](queue <-chan T, max int, flush func(batch []T), yield func()) {
	batch := make([]T, 0, max)
	for q := range queue {
		batch = fill(queue, append(batch[:0], q), max)
		for n := 0; n != len(batch) && len(batch) < max; {
			n = len(batch)
			yield()
			batch = fill(queue, batch, max)
		}
		flush(batch)
		clear(batch)
	}
}

// fill appends to batch what queue holds now, up to max requests in all.
func fill[T any](queue <-chan T, batch []T, max int) []T {
	for len(batch) < max {
		select {
		case q, ok := <-queue:
			if !ok {
				return batch
			}
			batch = append(batch, q)
		default:
			return batch
		}
	}
	return batch
}
