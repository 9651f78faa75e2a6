package main

import (
	"context"
	"errors"
	"log"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/redis"
)

// forgeRedis is the attacker with write access to Redis (issue 34, item 2):
// until ctx ends or hold has passed, it rewrites the records it finds, in
// turn: a record forged SETTLED with a result of its own (a false DUPLICATE
// for a key still in progress), a record copied whole onto another key (a
// real delivery answered as another's duplicate), and a token and holder
// forged (an owner who is not). claimd must verify each record's seal and
// let PostgreSQL decide instead, so the history stays linearizable and no
// answer names the forger. It knows the records' layout
// (redis.DecodeRecord), as an attacker reading claimd's source would, and
// keeps each record's seal. It returns how many records it forged, and an
// error when it found none to forge (the scenario would prove nothing).
func (b *backends) forgeRedis(ctx context.Context, hold time.Duration) (int, error) {
	opts, err := goredis.ParseURL(b.servers.Redis.URL())
	if err != nil {
		return 0, err
	}
	c := goredis.NewClient(opts)
	defer c.Close()
	forged := 0
	end := time.Now().Add(hold)
	var last []byte // the previous record read, to copy onto the next
	for time.Now().Before(end) && ctx.Err() == nil {
		keys, _, err := c.Scan(ctx, 0, "*", 200).Result()
		if err != nil {
			return forged, err
		}
		for _, k := range keys {
			v, err := c.Get(ctx, k).Bytes()
			if err != nil {
				continue // gone, or another type
			}
			rec, mac, err := redis.DecodeRecord(tiers.Key{}, v)
			if err != nil {
				continue // not a record (a pending marker), or one forged before
			}
			var forgery []byte
			switch forged % 3 {
			case 0: // settled, with a result the handler never stored
				rec.State, rec.Result = tiers.StateSettled, []byte("forged")
				forgery = redis.EncodeRecord(&rec, mac)
			case 1: // another key's record, copied whole (its seal too)
				forgery = last
			case 2: // a later owner, named by the forger
				rec.Token, rec.Holder = rec.Token+1, "forger"
				forgery = redis.EncodeRecord(&rec, mac)
			}
			last = v
			if forgery == nil {
				continue
			}
			if err := c.Set(ctx, k, forgery, goredis.KeepTTL).Err(); err != nil {
				return forged, err
			}
			forged++
		}
		sleep(ctx, 20*time.Millisecond)
	}
	if forged == 0 {
		return 0, errors.New("found no record in Redis to forge")
	}
	log.Printf("redis-forgery: forged %d records", forged)
	return forged, nil
}
