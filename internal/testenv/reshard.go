package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// SlotMigration moves hash slots from the primary that owns them to another
// primary by the protocol redis-cli --cluster reshard follows, one step per
// call so that a test can run load between the steps:
//
//   - BeginSlotMigration marks the slots IMPORTING on the target and MIGRATING
//     on the source: from then on the source answers a command for a key it
//     does not hold with -ASK, and a client must repeat it on the target
//     after ASKING;
//   - MoveKeys MIGRATEs the keys the source holds in those slots to the target
//     (each key moves atomically; commands on it wait);
//   - Finish moves what is left and assigns the slots to the target on every
//     primary: a client with the old slot map now gets -MOVED.
type SlotMigration struct {
	slots     []int
	src, dst  *goredis.Client
	srcID     string
	dstID     string
	dstAddr   string
	others    []*goredis.Client // every other primary, told the new owner last
	movedKeys int
}

// BeginSlotMigration starts moving slots, which must all belong to one
// primary, to another primary of c.
func (c *Cluster) BeginSlotMigration(ctx context.Context, slots []int) (*SlotMigration, error) {
	if len(slots) == 0 {
		return nil, errors.New("no slots to move")
	}
	admin := nodeClient(c.Addrs()[0])
	shards, err := admin.ClusterShards(ctx).Result()
	admin.Close()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SHARDS: %w", err)
	}
	// owners are the primaries of the shards that serve slots.
	type owner struct {
		id, addr string
		slots    []goredis.SlotRange
	}
	var owners []owner
	for _, sh := range shards {
		for _, n := range sh.Nodes {
			if n.Role == "master" && len(sh.Slots) > 0 {
				owners = append(owners, owner{id: n.ID, addr: net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)), slots: sh.Slots})
			}
		}
	}
	ownerOf := func(slot int) (owner, bool) {
		for _, o := range owners {
			for _, r := range o.slots {
				if r.Start <= int64(slot) && int64(slot) <= r.End {
					return o, true
				}
			}
		}
		return owner{}, false
	}
	src, ok := ownerOf(slots[0])
	if !ok {
		return nil, fmt.Errorf("slot %d has no owner", slots[0])
	}
	for _, s := range slots[1:] {
		if o, ok := ownerOf(s); !ok || o.id != src.id {
			return nil, fmt.Errorf("slot %d is not owned by %s, the owner of slot %d", s, src.addr, slots[0])
		}
	}
	m := &SlotMigration{slots: slots, srcID: src.id, src: nodeClient(src.addr)}
	for _, o := range owners {
		switch {
		case o.id == src.id:
		case m.dst == nil:
			m.dst, m.dstID, m.dstAddr = nodeClient(o.addr), o.id, o.addr
		default:
			m.others = append(m.others, nodeClient(o.addr))
		}
	}
	if m.dst == nil {
		m.Close()
		return nil, errors.New("the cluster has only one primary")
	}
	for _, s := range slots {
		// IMPORTING first: a client sent to the target by ASK must be served.
		if err := m.dst.Do(ctx, "CLUSTER", "SETSLOT", s, "IMPORTING", m.srcID).Err(); err != nil {
			m.Close()
			return nil, fmt.Errorf("CLUSTER SETSLOT %d IMPORTING: %w", s, err)
		}
		if err := m.src.Do(ctx, "CLUSTER", "SETSLOT", s, "MIGRATING", m.dstID).Err(); err != nil {
			m.Close()
			return nil, fmt.Errorf("CLUSTER SETSLOT %d MIGRATING: %w", s, err)
		}
	}
	return m, nil
}

// MoveKeys migrates every key the source holds in the slots now, and returns
// how many it moved.
func (m *SlotMigration) MoveKeys(ctx context.Context) (int, error) {
	host, port, err := net.SplitHostPort(m.dstAddr)
	if err != nil {
		return 0, err
	}
	moved := 0
	for _, s := range m.slots {
		for {
			keys, err := m.src.ClusterGetKeysInSlot(ctx, s, 100).Result()
			if err != nil {
				return moved, fmt.Errorf("CLUSTER GETKEYSINSLOT %d: %w", s, err)
			}
			if len(keys) == 0 {
				break
			}
			args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
			for _, k := range keys {
				args = append(args, k)
			}
			// MIGRATE answers NOKEY when every key went (expired or moved) meanwhile.
			if err := m.src.Do(ctx, args...).Err(); err != nil && err.Error() != "NOKEY" {
				return moved, fmt.Errorf("MIGRATE %d keys of slot %d: %w", len(keys), s, err)
			}
			moved += len(keys)
		}
	}
	m.movedKeys += moved
	return moved, nil
}

// Finish moves the keys left and gives the slots to the target: the target
// first, then the source, then the other primaries (gossip would tell them
// too, later). It returns how many keys the whole migration moved.
func (m *SlotMigration) Finish(ctx context.Context) (int, error) {
	defer m.Close()
	if _, err := m.MoveKeys(ctx); err != nil {
		return m.movedKeys, err
	}
	for _, c := range append([]*goredis.Client{m.dst, m.src}, m.others...) {
		for _, s := range m.slots {
			if err := c.Do(ctx, "CLUSTER", "SETSLOT", s, "NODE", m.dstID).Err(); err != nil {
				return m.movedKeys, fmt.Errorf("CLUSTER SETSLOT %d NODE on %s: %w", s, c.Options().Addr, err)
			}
		}
	}
	return m.movedKeys, nil
}

// Close releases the migration's connections; Finish calls it.
func (m *SlotMigration) Close() {
	for _, c := range append([]*goredis.Client{m.src, m.dst}, m.others...) {
		if c != nil {
			c.Close()
		}
	}
	m.src, m.dst, m.others = nil, nil, nil
}

// KeySlot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag, the part between the first '{' and the next '}' when that is not
// empty, else of the whole key, modulo 16384. Tests use it to put load on
// the slots they move.
func KeySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % clusterSlots
}
