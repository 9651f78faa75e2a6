package claimd

import (
	"fmt"
	"io"
	"net/http"
	"strings"
)

// ReadDelivery reads an HTTP request as a Delivery for ClaimRequest: every
// header (repeated values joined with ", ") and the raw body, of at most
// maxBody bytes. claimd derives the key by the provider's rule and never
// uses per-delivery signature or timestamp headers for it.
//
// Verify the provider's signature on the returned body before claiming:
// an unverified delivery must not be able to occupy a key.
func ReadDelivery(r *http.Request, maxBody int64) (*Delivery, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("reading delivery body: %w", err)
	}
	if int64(len(body)) > maxBody {
		return nil, fmt.Errorf("delivery body exceeds %d bytes", maxBody)
	}
	headers := make(map[string]string, len(r.Header))
	for name, values := range r.Header {
		headers[name] = strings.Join(values, ", ")
	}
	return &Delivery{Headers: headers, Body: body}, nil
}
