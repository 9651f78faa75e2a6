package sqlite

import (
	"context"
	"database/sql"
	"strings"
	"testing"
)

// TestDurabilityPragma: every connection of a Store, the writer's and each
// reader's, runs with the synchronous level of its Durability, FULL unless
// told otherwise. PRAGMA synchronous reads 2 for FULL, 1 for NORMAL.
func TestDurabilityPragma(t *testing.T) {
	tests := []struct {
		desc string
		cfg  Config
		want int
	}{
		{"default", Config{}, 2},
		{"full", Config{Durability: DurabilityFull}, 2},
		{"relaxed", Config{Durability: DurabilityRelaxed}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Path = tempPath(t)
			s, err := New(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			mustClaim(t, s, claimAt("evt_1", t0)) // the writer has committed through the committer
			ctx := context.Background()
			check := func(name string, db *sql.DB, conns int) {
				t.Helper()
				// Hold conns connections at once, so that each one of the
				// pool is asked, not the same idle one again.
				var held []*sql.Conn
				defer func() {
					for _, c := range held {
						c.Close()
					}
				}()
				for i := range conns {
					c, err := db.Conn(ctx)
					if err != nil {
						t.Fatal(err)
					}
					held = append(held, c)
					var got int
					if err := c.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&got); err != nil {
						t.Fatal(err)
					}
					if got != tc.want {
						t.Errorf("%s connection %d: PRAGMA synchronous = %d, want %d", name, i, got, tc.want)
					}
				}
			}
			check("write", s.w, 1)
			check("read", s.r, readConns)
		})
	}
}

func TestParseDurability(t *testing.T) {
	for _, d := range []Durability{DurabilityFull, DurabilityRelaxed} {
		got, err := ParseDurability(d.String())
		if err != nil || got != d {
			t.Errorf("ParseDurability(%q) = %v, %v; want %v", d.String(), got, err, d)
		}
	}
	for _, in := range []string{"", "FULL", "normal", "off", strings.Repeat("x", 1000)} {
		_, err := ParseDurability(in)
		if err == nil {
			t.Errorf("ParseDurability(%.40q) error = nil, want a refusal", in)
			continue
		}
		if len(err.Error()) > 120 {
			t.Errorf("ParseDurability(%d bytes) error is %d bytes long, want the input clipped: %.80s…", len(in), len(err.Error()), err)
		}
	}
}
