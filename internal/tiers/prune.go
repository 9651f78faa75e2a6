package tiers

import (
	"context"
	"time"
)

// Pruned counts the rows of each kind that a prune deleted, or that it would
// delete (a dry run's count). Every kind a durable tier keeps past a window
// is here, so that nothing it deletes goes uncounted.
type Pruned struct {
	Claims       int64 // records whose dedup window ended
	Entities     int64 // entities whose last window ended
	EntityEvents int64 // the applied events of those entities, which go with them
	Deferrals    int64 // deferral rows whose last delivery's window ended
}

// EntityPruner is a Durable tier that keeps entity lifecycles (Entities)
// and deletes what outlived them, as Prune deletes records.
//
// An entity lives as long as any claim or deferral of it is within its
// dedup window: every claim of one of its events that the tier orders, and
// every deferral, moves the entity's expiry to that delivery's window end
// at least, and so does the settle that applies an event (to its record's
// window end). While it lives, a redelivery is ordered against the state
// its earlier events reached. A deferral row lives until its last
// delivery's window ends, past the provider's retry horizon, so that
// ListDeferred can report it lost first.
type EntityPruner interface {
	// PruneEntities deletes up to limit entities whose expiry is before
	// cutoff, with their applied events, and up to limit deferral rows
	// whose expiry is before it, and counts them (Claims is 0). A caller
	// loops until both Entities and Deferrals are below limit. A row
	// whose expiry moved past cutoff since it was chosen is kept.
	PruneEntities(ctx context.Context, cutoff time.Time, limit int) (Pruned, error)
	// CountPrunable counts what Prune and PruneEntities would delete now
	// with cutoff, every kind (claimd prune --dry-run).
	CountPrunable(ctx context.Context, cutoff time.Time) (Pruned, error)
}
