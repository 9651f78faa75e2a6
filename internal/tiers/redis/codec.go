package redis

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/claimd/claimd/internal/tiers"
)

// This file is the layout of a key's value: one Redis string, either a
// pending marker or a record.
//
// A pending marker is "p<until>:<nonce>", until in unix microseconds, in
// decimal: the scripts write and read it, and nothing else does.
//
// A record is the byte recordFormat followed by a protobuf message (wire
// format, encoded here with protowire; it has no .proto file because
// nothing but this file reads it), its fields in the order of recordFields.
// Fields at their zero value are left out. The window end and the version
// come first, always, so that put.lua can order a Put against the record
// (reading two varints) without knowing the rest. Times after the window
// are deltas (zigzag), which take 4–6 bytes where an absolute time takes 8.
// The seal is its 16 raw bytes. A record holds tiers.TerminalCopy of what
// was Put, and a result longer than MaxInlineResult is not kept at all
// (resultInDurable). A settled Stripe record with a small result costs
// Redis 296 bytes (MEMORY USAGE, key and value) where the hash of 18
// fields it replaced cost 552 (size_test.go).

// recordFormat is the first byte of a record's value. Any other first byte
// but a marker's 'p' is not a record this claimd wrote, and fails like a
// record whose seal fails.
const recordFormat = 0x01

// The field numbers of a record. Numbers 1–15 take one byte of tag: the
// fields of a settled record have them.
const (
	fWindow          = 1  // varint: window end, unix µs; first, for put.lua
	fVersion         = 2  // varint; second, for put.lua
	fMAC             = 3  // bytes: the seal, internal/tiers/seal
	fState           = 4  // varint: tiers.State
	fHolder          = 5  // bytes
	fPayload         = 6  // bytes: payload hash
	fResult          = 7  // bytes: the result, when it is kept inline
	fFirstSeen       = 8  // zigzag: window end − first seen, µs
	fLease           = 9  // zigzag: lease end − first seen, µs
	fAttempt         = 10 // varint
	fReleased        = 11 // varint 1
	fResultInDurable = 12 // varint 1: the result is the durable tier's to give
	fToken           = 13 // varint
	fReason          = 14 // varint: tiers.Reason
	fAttemptID       = 15 // bytes
	fSalt            = 16 // bytes
	fSecretHash      = 17 // bytes
	fUpdated         = 18 // zigzag: updated − first seen, µs
)

// MaxInlineResult is the longest result a record keeps in Redis. Past it,
// the record keeps only a mark, and a duplicate reads the result from the
// durable tier (tiers.FastResult.ResultInDurable). 64 bytes holds what most
// handlers store (a status, an id, a small JSON such as
// {"charge":"ch_3NG8Du2eZvKYlo2C","status":"ok"}) and keeps a settled
// record near 300 bytes of Redis; every byte past it would be held for the
// whole window (84 hours for Stripe) by every event, to spare a durable
// read to the few duplicates that miss the replica's local cache.
const MaxInlineResult = 64

// resultInDurable stands, in the record that is sealed, for a result the
// fast tier does not keep, so the seal covers the choice: a forger cannot
// turn a record whose result is elsewhere into one answered with no result
// (or the other way) without breaking it. A record holds it as the one
// field fResultInDurable, and decodes it back to these bytes, so the two
// encodings of it mean the same. A real result equal to them (never
// inline: they are longer than MaxInlineResult) is read from the durable
// tier like any long one.
var resultInDurable = []byte("\x00claimd: the result of this record is kept by the durable tier only\x00")

// stored is what a record Put keeps of rec: tiers.TerminalCopy, with a long
// result replaced by resultInDurable. It is what the seal covers.
func stored(rec tiers.Record) tiers.Record {
	rec = tiers.TerminalCopy(rec)
	if len(rec.Result) > MaxInlineResult {
		rec.Result = resultInDurable
	}
	return rec
}

// EncodeRecord returns the value that holds rec (already stored()) with its
// seal mac. It is exported for tools that write Redis as claimd would (make
// chaos's forger); claimd itself writes only through Put.
func EncodeRecord(rec *tiers.Record, mac []byte) []byte {
	b := make([]byte, 0, 96+len(rec.Holder)+len(rec.AttemptID)+len(rec.PayloadHash)+len(rec.Result)+len(rec.Salt)+len(rec.SecretHash))
	b = append(b, recordFormat)
	window := rec.WindowExpiresAt.UnixMicro()
	b = appendVarint(b, fWindow, uint64(window))
	b = appendVarint(b, fVersion, rec.Version)
	b = appendBytes(b, fMAC, mac)
	b = appendVarint(b, fState, uint64(rec.State))
	b = appendBytes(b, fHolder, []byte(rec.Holder))
	b = appendBytes(b, fPayload, rec.PayloadHash)
	if bytes.Equal(rec.Result, resultInDurable) {
		b = appendVarint(b, fResultInDurable, 1)
	} else {
		b = appendBytes(b, fResult, rec.Result)
	}
	first := rec.FirstSeenAt.UnixMicro()
	b = appendTime(b, fFirstSeen, rec.FirstSeenAt, window-first)
	b = appendTime(b, fLease, rec.LeaseExpiresAt, rec.LeaseExpiresAt.UnixMicro()-first)
	b = appendVarint(b, fAttempt, uint64(rec.Attempt))
	if rec.Released {
		b = appendVarint(b, fReleased, 1)
	}
	b = appendVarint(b, fToken, rec.Token)
	b = appendVarint(b, fReason, uint64(rec.Reason))
	b = appendBytes(b, fAttemptID, []byte(rec.AttemptID))
	b = appendBytes(b, fSalt, rec.Salt)
	b = appendBytes(b, fSecretHash, rec.SecretHash)
	return appendTime(b, fUpdated, rec.UpdatedAt, rec.UpdatedAt.UnixMicro()-first)
}

// appendTime appends field num, delta zigzagged, unless t is the zero time;
// a zero delta is written (unlike a zero varint), as it is a time.
func appendTime(b []byte, num protowire.Number, t time.Time, delta int64) []byte {
	if t.IsZero() {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, protowire.EncodeZigZag(delta))
}

// appendVarint appends field num unless v is zero.
func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// appendBytes appends field num unless v is empty.
func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// errNotRecord: a value that is not a record of this layout.
var errNotRecord = errors.New("not a record: unknown first byte")

// DecodeRecord is the inverse of EncodeRecord: the record of k that v holds
// and its seal. The record's byte fields share v's memory; a field left
// out reads as its zero value (empty bytes as nil). An error means v is not
// a record this layout writes, which Reserve treats like a seal that fails.
func DecodeRecord(k tiers.Key, v []byte) (rec tiers.Record, mac []byte, err error) {
	rec.Key = k
	if len(v) == 0 || v[0] != recordFormat {
		return rec, nil, errNotRecord
	}
	b := v[1:]
	var window, first, lease, updated int64
	var haveWindow, haveFirst, haveLease, haveUpdated bool
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return rec, nil, fmt.Errorf("record: %w", protowire.ParseError(n))
		}
		b = b[n:]
		var x uint64
		var s []byte
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			s, n = protowire.ConsumeBytes(b)
			if len(s) == 0 {
				s = nil
			}
		default:
			return rec, nil, fmt.Errorf("record: field %d of wire type %d", num, typ)
		}
		if n < 0 {
			return rec, nil, fmt.Errorf("record: field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if want := fieldType(num); want != typ {
			return rec, nil, fmt.Errorf("record: field %d of wire type %d, want %d", num, typ, want)
		}
		switch num {
		case fWindow:
			window, haveWindow = int64(x), true
		case fVersion:
			rec.Version = x
		case fMAC:
			mac = s
		case fState:
			if x >= 1<<8 {
				return rec, nil, fmt.Errorf("record: state %d", x)
			}
			rec.State = tiers.State(x)
		case fHolder:
			rec.Holder = string(s)
		case fPayload:
			rec.PayloadHash = s
		case fResult:
			rec.Result = s
		case fResultInDurable:
			rec.Result = resultInDurable
		case fFirstSeen:
			first, haveFirst = protowire.DecodeZigZag(x), true
		case fLease:
			lease, haveLease = protowire.DecodeZigZag(x), true
		case fAttempt:
			if x >= 1<<32 {
				return rec, nil, fmt.Errorf("record: attempt %d", x)
			}
			rec.Attempt = uint32(x)
		case fReleased:
			rec.Released = x == 1
		case fToken:
			rec.Token = x
		case fReason:
			if x >= 1<<8 {
				return rec, nil, fmt.Errorf("record: reason %d", x)
			}
			rec.Reason = tiers.Reason(x)
		case fAttemptID:
			rec.AttemptID = string(s)
		case fSalt:
			rec.Salt = s
		case fSecretHash:
			rec.SecretHash = s
		case fUpdated:
			updated, haveUpdated = protowire.DecodeZigZag(x), true
		}
	}
	// Times come back as the record's deltas left them: first seen from
	// the window end, the others from first seen (the zero time's unix
	// microseconds when it was left out).
	zero := time.Time{}.UnixMicro()
	firstUs := zero
	if haveFirst {
		firstUs = window - first
		rec.FirstSeenAt = fromMicros(firstUs)
	}
	if haveWindow {
		rec.WindowExpiresAt = fromMicros(window)
	}
	if haveLease {
		rec.LeaseExpiresAt = fromMicros(firstUs + lease)
	}
	if haveUpdated {
		rec.UpdatedAt = fromMicros(firstUs + updated)
	}
	return rec, mac, nil
}

// fieldType is the wire type of field num; 0 (VarintType) for an unknown
// one is wrong for none, so unknown fields are refused by type or below.
func fieldType(num protowire.Number) protowire.Type {
	switch num {
	case fMAC, fHolder, fPayload, fResult, fAttemptID, fSalt, fSecretHash:
		return protowire.BytesType
	case fWindow, fVersion, fState, fFirstSeen, fLease, fAttempt, fReleased, fResultInDurable, fToken, fReason, fUpdated:
		return protowire.VarintType
	}
	return -1
}

// ceilMillis rounds d up to whole milliseconds, at least 1: a key's expiry
// may come a little after the instant it stands for, never before, and a
// zero PEXPIRE would delete the key at once.
func ceilMillis(d time.Duration) int64 {
	ms := d.Milliseconds()
	if d%time.Millisecond > 0 {
		ms++
	}
	return max(ms, 1)
}

// windowEndMillis is t in unix milliseconds, rounded up, for PXAT. Up, so
// that the key never vanishes while its window is open; in the part of a
// millisecond it may outlive the window, Reserve answers FastTakeover from
// the window end the record holds, so the extra instant decides nothing.
func windowEndMillis(t time.Time) int64 {
	us := t.UnixMicro()
	ms := us / 1000
	if us%1000 > 0 {
		ms++
	}
	return ms
}

// fromMicros is the inverse of time.Time.UnixMicro, in UTC like the service
// clock.
func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }
