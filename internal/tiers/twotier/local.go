package twotier

import (
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/claimd/claimd/internal/tiers"
)

// localCache holds terminal records until their window ends, bounded by
// entries and by the bytes of their results. A terminal record within its
// window never changes, so a hit needs no network hop and no invalidation.
type localCache struct {
	mu       sync.Mutex
	lru      *lru.LRU[tiers.Key, tiers.Record]
	bytes    int64
	maxBytes int64
}

func newLocalCache(entries int, maxBytes int64) *localCache {
	c := &localCache{maxBytes: maxBytes}
	l, err := lru.NewLRU[tiers.Key, tiers.Record](entries, func(_ tiers.Key, r tiers.Record) {
		c.bytes -= recordBytes(r)
	})
	if err != nil {
		panic(err) // only for entries <= 0, which New never passes
	}
	c.lru = l
	return c
}

func recordBytes(r tiers.Record) int64 {
	return int64(len(r.Result) + len(r.PayloadHash) + len(r.Key.Key) + len(r.Holder) + 160)
}

func (c *localCache) get(k tiers.Key, now time.Time) (tiers.Record, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.lru.Get(k)
	if !ok {
		return tiers.Record{}, false
	}
	if r.WindowOver(now) {
		c.lru.Remove(k)
		return tiers.Record{}, false
	}
	return r, true
}

func (c *localCache) add(r tiers.Record) {
	size := recordBytes(r)
	if size > c.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Remove(r.Key)
	c.lru.Add(r.Key, r)
	c.bytes += size
	for c.bytes > c.maxBytes {
		if _, _, ok := c.lru.RemoveOldest(); !ok {
			break
		}
	}
}
