// Package claimd is the Go client of claimd, the service that webhook
// handlers ask before a side effect whether a delivery is the first and
// whether they own it.
//
// Most receivers need three calls: Dial once, ReadDelivery per request, and
// Guard around the side effect:
//
//	c, err := claimd.Dial(ctx, "127.0.0.1:50051")
//	...
//	http.HandleFunc("POST /webhooks/stripe", func(w http.ResponseWriter, r *http.Request) {
//		d, err := claimd.ReadDelivery(r, 1<<20)
//		if err != nil {
//			http.Error(w, err.Error(), http.StatusBadRequest)
//			return
//		}
//		c.Guard(r.Context(), claimd.ClaimRequest{Namespace: "billing", Provider: "stripe", Delivery: d},
//			func(ctx context.Context, cl claimd.Claim) ([]byte, error) {
//				return chargeOnce(ctx, d.Body) // the side effect
//			}).Respond(w)
//	})
//
// The typed calls (Claim, Transition, Renew, Release, Get) are thin
// wrappers over the idempotency.v1 API for flows Guard does not cover.
// Transition, Renew and Release take the Lease of an ACQUIRED Claim
// (Claim.Lease): its fencing token and the lease secret that proves
// ownership.
// Every call retries UNAVAILABLE under a bounded RetryPolicy, and a retried
// Claim keeps its attempt_id so that claimd answers the same ACQUIRED.
// Errors are *Error values that match ErrStaleToken, ErrNotOwner,
// ErrInvalidTransition, ErrResultMismatch, ErrNotFound, ErrProviderNotFound,
// ErrInvalidArgument, ErrUnavailable, ErrUnauthenticated,
// ErrPermissionDenied and ErrResourceExhausted with errors.Is.
//
// Guard follows the contract every claimd guard shares, written in
// clients/GUARD.md and checked by the scenarios in clients/guardspec.
// Inside the guarded function, Effect commits the function's writes to its
// own database (database/sql, PostgreSQL or SQLite) together with a fence row
// for the delivery, so that they happen exactly once across holders.
//
// A claimd that requires TLS and credentials is dialed with WithTLSFiles
// (or WithTLS) and WithToken (or WithTokenSource); plaintext is the default
// for loopback targets only, and a token never leaves the machine in
// plaintext.
package claimd
