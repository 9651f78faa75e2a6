package tiers

// Batches runs the group-commit loop the backends share (PostgreSQL's claim
// and write batchers, SQLite's committer, Redis's script coalescer): it
// takes the first request off queue, adds whatever else is already queued
// (up to max), hands the batch to flush, and starts over, until queue is
// closed and drained. A batch is whatever queued while the previous one was
// in flight; no timer ever holds a request back. The slice flush gets is
// reused: flush must not keep it, and its references are cleared after
// flush returns so answered callers can be collected.
func Batches[T any](queue <-chan T, max int, flush func(batch []T)) {
	batch := make([]T, 0, max)
	for q := range queue {
		batch = append(batch[:0], q)
	fill:
		for len(batch) < max {
			select {
			case q, ok := <-queue:
				if !ok {
					break fill
				}
				batch = append(batch, q)
			default:
				break fill
			}
		}
		flush(batch)
		clear(batch)
	}
}
