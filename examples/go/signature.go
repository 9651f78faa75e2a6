package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// signatureTolerance is Stripe's default: a signed timestamp older than
// this is a replay.
const signatureTolerance = 5 * time.Minute

var errBadSignature = errors.New("invalid Stripe-Signature")

// verifyStripeSignature checks a Stripe-Signature header
// ("t=<unix>,v1=<hex hmac>[,v1=...]") against the raw body: the HMAC-SHA256
// of "<t>.<body>" under the endpoint secret, with t within tolerance of now.
// It runs before the claim, so an unsigned request can never occupy a key.
func verifyStripeSignature(header string, body []byte, secret string, now time.Time) error {
	var (
		ts   int64 = -1
		sigs [][]byte
	)
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return errBadSignature
			}
			ts = n
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	if ts < 0 || len(sigs) == 0 {
		return errBadSignature
	}
	if d := now.Sub(time.Unix(ts, 0)); d > signatureTolerance || d < -signatureTolerance {
		return errors.New("Stripe-Signature timestamp outside the tolerance")
	}
	want := stripeSignature(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			return nil
		}
	}
	return errBadSignature
}

// stripeSignature is the v1 signature of body signed at ts.
func stripeSignature(secret string, ts int64, body []byte) []byte {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(strconv.FormatInt(ts, 10) + "."))
	mac.Write(body)
	return mac.Sum(nil)
}
