package main

import (
	"context"
	"errors"
	"log"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// forgeRedis is the attacker with write access to Redis (issue 34, item 2):
// until ctx ends or hold has passed, it rewrites the records it finds, in
// turn: a record forged SETTLED with a result of its own (a false DUPLICATE
// for a key still in progress), a record copied whole onto another key (a
// real delivery answered as another's duplicate), and a token and holder
// forged (an owner who is not). claimd must verify each record's seal and
// let PostgreSQL decide instead, so the history stays linearizable and no
// answer names the forger. It returns how many records it forged, and an
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
	var last map[string]string // the previous record read, to copy onto the next
	for time.Now().Before(end) && ctx.Err() == nil {
		keys, _, err := c.Scan(ctx, 0, "*", 200).Result()
		if err != nil {
			return forged, err
		}
		for _, k := range keys {
			rec, err := c.HGetAll(ctx, k).Result()
			if err != nil || rec["state"] == "" {
				continue // not a record (a pending marker, another type), or gone
			}
			switch forged % 3 {
			case 0: // settled, with a result the handler never stored
				err = c.HSet(ctx, k, "state", "4", "result", "forged").Err()
			case 1: // another key's record, copied whole (its seal too)
				if last == nil {
					break
				}
				fields := make([]any, 0, 2*len(last))
				for f, v := range last {
					fields = append(fields, f, v)
				}
				err = c.HSet(ctx, k, fields...).Err()
			case 2: // a later owner, named by the forger
				tok, _ := strconv.ParseInt(rec["token"], 10, 64)
				err = c.HSet(ctx, k, "token", strconv.FormatInt(tok+1, 10), "holder", "forger").Err()
			}
			if err != nil {
				return forged, err
			}
			forged++
			last = rec
		}
		sleep(ctx, 20*time.Millisecond)
	}
	if forged == 0 {
		return 0, errors.New("found no record in Redis to forge")
	}
	log.Printf("redis-forgery: forged %d records", forged)
	return forged, nil
}
