package clock_test

import (
	"context"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/clock"
)

func TestFakeAfterFiresWhenTimeReachesIt(t *testing.T) {
	start := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	c := clock.NewFake(start)
	now := c.After(0)
	soon, later := c.After(time.Second), c.After(2*time.Second)
	if got := <-now; !got.Equal(start) {
		t.Fatalf("After(0) = %v, want %v at once", got, start)
	}
	c.Advance(999 * time.Millisecond)
	select {
	case got := <-soon:
		t.Fatalf("After(1s) fired at %v, 999ms in", got)
	default:
	}
	c.Advance(time.Millisecond)
	if got := <-soon; !got.Equal(start.Add(time.Second)) {
		t.Fatalf("After(1s) = %v, want %v", got, start.Add(time.Second))
	}
	select {
	case got := <-later:
		t.Fatalf("After(2s) fired at %v, 1s in", got)
	default:
	}
	c.Set(start.Add(time.Hour))
	if got := <-later; !got.Equal(start.Add(time.Hour)) {
		t.Fatalf("After(2s) after Set = %v, want %v", got, start.Add(time.Hour))
	}
}

func TestFakeAwaitWaiters(t *testing.T) {
	c := clock.NewFake(time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	woke := make(chan time.Time)
	go func() { woke <- <-c.After(time.Minute) }()
	if err := c.AwaitWaiters(ctx, 1); err != nil {
		t.Fatalf("AwaitWaiters(1) = %v with a goroutine waiting", err)
	}
	c.Advance(time.Minute)
	<-woke

	short, cancelShort := context.WithCancel(context.Background())
	cancelShort()
	if err := c.AwaitWaiters(short, 1); err != context.Canceled {
		t.Fatalf("AwaitWaiters(1) with nobody waiting = %v, want context.Canceled", err)
	}
}
