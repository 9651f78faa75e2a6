package tiers

// Rows are the rows of a query as both database/sql and pgx give them;
// the caller closes them.
type Rows interface {
	Next() bool
	Err() error
}

// ScanPage reads the rows of one page of a listing (ListClaims, ListAudit,
// ListDeferred), whose query asks for limit+1 rows: the one past the page
// tells that there is a next. scan reads the current row into an item. It
// returns at most limit items and, when a row was past them, the cursor
// that continues after the page's last item (cursor(page)); otherwise "".
// Its error is scan's or rows' own, for the store to translate.
func ScanPage[T any](rows Rows, limit int, scan func() (T, error), cursor func(page []T) string) ([]T, string, error) {
	var page []T
	for rows.Next() {
		item, err := scan()
		if err != nil {
			return nil, "", err
		}
		page = append(page, item)
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	if len(page) <= limit {
		return page, "", nil
	}
	page = page[:limit]
	return page, cursor(page), nil
}
