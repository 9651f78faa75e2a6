package tiers

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// fakeRows yields n rows, then err.
type fakeRows struct {
	n, at int
	err   error
}

func (r *fakeRows) Next() bool { r.at++; return r.at <= r.n }
func (r *fakeRows) Err() error { return r.err }

// TestScanPage: a page is at most limit items; a row past them gives the
// cursor after the page's last item; a scan's or the rows' error is
// returned as it is, with no page.
func TestScanPage(t *testing.T) {
	errScan, errRows := errors.New("scan failed"), errors.New("rows failed")
	for _, c := range []struct {
		desc       string
		rows       int
		rowsErr    error
		failAt     int // the row whose scan fails; 0 for none
		wantPage   []int
		wantCursor string
		wantErr    error
	}{
		{desc: "no rows", wantPage: nil},
		{desc: "fewer than a page", rows: 2, wantPage: []int{1, 2}},
		{desc: "a full page, no more", rows: 3, wantPage: []int{1, 2, 3}},
		{desc: "one past the page", rows: 4, wantPage: []int{1, 2, 3}, wantCursor: "after 3"},
		{desc: "a scan fails", rows: 4, failAt: 2, wantErr: errScan},
		{desc: "the rows fail", rows: 2, rowsErr: errRows, wantErr: errRows},
	} {
		t.Run(c.desc, func(t *testing.T) {
			rows := &fakeRows{n: c.rows, err: c.rowsErr}
			page, cursor, err := ScanPage(rows, 3, func() (int, error) {
				if rows.at == c.failAt {
					return 0, errScan
				}
				return rows.at, nil
			}, func(last int) string { return fmt.Sprint("after ", last) })
			if !errors.Is(err, c.wantErr) || !slices.Equal(page, c.wantPage) || cursor != c.wantCursor {
				t.Errorf("ScanPage of %d rows = %v, %q, %v; want %v, %q, %v", c.rows, page, cursor, err, c.wantPage, c.wantCursor, c.wantErr)
			}
		})
	}
}
