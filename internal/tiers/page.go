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
// that continues after the page's last item (cursor(last)); otherwise "".
// Its error is scan's or rows' own, for the store to translate.
func ScanPage[T any](rows Rows, limit int, scan func() (T, error), cursor func(last T) string) ([]T, string, error) {
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
	return page, cursor(page[limit-1]), nil
}

// ScanAuditPage is ScanPage for ListAudit of k: scan reads an entry and
// its row's id, which orders entries of one instant and goes into the
// cursor.
func ScanAuditPage(rows Rows, k Key, limit int, scan func() (AuditEntry, int64, error)) ([]AuditEntry, string, error) {
	var ids []int64
	return ScanPage(rows, limit, func() (AuditEntry, error) {
		e, id, err := scan()
		ids = append(ids, id)
		return e, err
	}, func(last AuditEntry) string {
		return EncodeAuditCursor(k, AuditPosition{At: last.At, ID: ids[limit-1]})
	})
}
