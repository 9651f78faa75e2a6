package filewatch_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/filewatch"
)

func TestPoll(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	write := func(path, s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(a, "a1")
	write(b, "b1")
	clk := clock.NewFake(time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC))
	f := filewatch.New(clk, 10*time.Second, a, "", b)

	var got []string // what load was handed, as "a|<absent>|b"
	loadErr := error(nil)
	load := func(c [][]byte) error {
		if c[1] != nil {
			t.Errorf("an empty path read as %q, want nil", c[1])
		}
		got = append(got, string(c[0])+"|"+string(c[2]))
		return loadErr
	}
	poll := func(want bool, wantErr error) {
		t.Helper()
		ran, err := f.Poll(load)
		if ran != want || !errors.Is(err, wantErr) && err != wantErr {
			t.Fatalf("Poll() = %v, %v; want %v, %v", ran, err, want, wantErr)
		}
	}
	if err := f.Load(load); err != nil || len(got) != 1 || got[0] != "a1|b1" {
		t.Fatalf("Load() = %v, handed %q; want a1|b1", err, got)
	}

	write(b, "b2")
	poll(false, nil) // not due: nothing read
	clk.Advance(10 * time.Second)
	poll(true, nil)
	if got[len(got)-1] != "a1|b2" {
		t.Fatalf("handed %q after b changed, want a1|b2", got)
	}
	clk.Advance(10 * time.Second)
	poll(false, nil) // due, unchanged: not handed over again

	// A reading load refuses is handed over once, not at every check.
	loadErr = errors.New("does not parse")
	write(a, "broken")
	clk.Advance(10 * time.Second)
	poll(true, loadErr)
	clk.Advance(10 * time.Second)
	poll(false, nil)
	// A read error likewise, and it names the file.
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second)
	poll(true, fs.ErrNotExist)
	clk.Advance(10 * time.Second)
	poll(false, nil)
	// Load hands over whatever the files hold, changed or not.
	loadErr = nil
	write(a, "a1")
	n := len(got)
	if err := f.Load(load); err != nil || len(got) != n+1 {
		t.Fatalf("Load() = %v, handed %d more; want 1", err, len(got)-n)
	}
	if err := f.Load(load); err != nil || len(got) != n+2 {
		t.Fatalf("Load() of unchanged files = %v, handed %d more; want 2", err, len(got)-n)
	}
	// ... and restarts the interval.
	write(a, "a3")
	poll(false, nil)
}
