package main

import "context"

// The ledger's queries that only the tests ask: a receiver books, it does
// not read its bookings back.

// Balance returns the sum booked for an order.
func (l *ledger) Balance(ctx context.Context, orderID string) (int64, error) {
	var sum int64
	err := l.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(amount), 0) FROM ledger WHERE order_id = ?`, orderID).Scan(&sum)
	return sum, err
}

// Rows returns every row's event type and amount, oldest first.
func (l *ledger) Rows(ctx context.Context) ([]booking, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT event_id, event_type, object_id, amount FROM ledger ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []booking
	for rows.Next() {
		var b booking
		if err := rows.Scan(&b.EventID, &b.EventType, &b.ObjectID, &b.Amount); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// booking is one row as Rows reads it.
type booking struct {
	EventID, EventType, ObjectID string
	Amount                       int64
}
