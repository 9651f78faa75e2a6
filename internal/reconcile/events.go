// Package reconcile compares a provider's own list of events with what
// claimd recorded of them, and says which events need a person: those
// claimd never saw, those claimed but never settled, those that failed, and
// those deferred for so long that the provider's retries may run out.
//
// It is pure: the events come from a reader, the records from the caller
// (claimd reconcile asks the API), and time from Policy.Now. Keys are
// derived by the provider's key rule with package horizon, exactly as a
// Claim of the raw delivery derives them.
package reconcile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/claimd/claimd/internal/horizon"
)

// Bounds of an events file. A reconciliation reads the provider's events of
// one window: Stripe's 3-day window of a busy account is a few hundred
// thousand events; the bounds leave room for that and stop a wrong file
// (a database dump, /dev/zero) before it takes the machine's memory.
const (
	// DefaultMaxBytes bounds the file read.
	DefaultMaxBytes = 512 << 20
	// DefaultMaxEvents bounds the events in it.
	DefaultMaxEvents = 500_000
)

// Limits bound what ReadEvents accepts. Zero values mean the defaults.
type Limits struct {
	MaxBytes  int64
	MaxEvents int
}

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxEvents <= 0 {
		l.MaxEvents = DefaultMaxEvents
	}
	return l
}

// ErrTooLarge is returned when the events exceed Limits.
var ErrTooLarge = errors.New("events file too large")

// Event is one provider event of the file.
type Event struct {
	// Index is the event's position in the file, from 1.
	Index int
	// ID and Type are the provider's event id and type, for people: Stripe's
	// id and type, an Adyen notification item's pspReference and eventCode.
	// Either may be empty for a provider whose events name them otherwise.
	ID, Type string
	// Created is when the provider created the event; zero when the event
	// does not say.
	Created time.Time
	// Key is the canonical key claimd derives for the event's delivery.
	Key string
}

// KeyFunc derives the canonical key of an event's body.
type KeyFunc func(body []byte) (string, error)

// ErrNoKey says that a provider's key rule finds no value in an event: the
// rule reads a header (which an exported event does not carry), or the
// event has another shape than the provider's deliveries. claimd would key
// such a delivery by the hash of its raw bytes, which an export does not
// reproduce, so the event cannot be looked up.
var ErrNoKey = errors.New("the key rule finds no value in the event")

// KeyRule returns the KeyFunc of a provider's key rule, as ProviderService
// reports it (key_rule). A body is keyed exactly as a Claim of a delivery
// with that body and no headers.
func KeyRule(provider, rule string) (KeyFunc, error) {
	if rule == "" {
		return nil, fmt.Errorf("provider %s has no key rule (a group whose members key differently?): reconcile derives keys from event bodies", provider)
	}
	r, err := horizon.ParseRule(rule)
	if err != nil {
		return nil, fmt.Errorf("provider %s: %w", provider, err)
	}
	p := &horizon.Provider{Name: provider, KeyRule: rule, Rule: r}
	return func(body []byte) (string, error) {
		d, err := p.DeriveKey(horizon.NewDelivery(nil, body))
		if err != nil {
			return "", err
		}
		if d.Fallback {
			return "", fmt.Errorf("%w (rule %s)", ErrNoKey, rule)
		}
		return d.Key, nil
	}, nil
}

// ReadEvents reads an events file: a sequence of JSON values, each either a
// list page as Stripe's GET /v1/events answers it ({"object": "list",
// "data": [...], "has_more": ...}), whose data are events, or one event
// object (JSONL: one per line; any whitespace between values will do, so
// pages saved one after another or one per line are read alike). Events
// are keyed with key; an event listed twice (overlapping pages) is kept
// once, at its first position.
func ReadEvents(r io.Reader, lim Limits, key KeyFunc) ([]Event, error) {
	lim = lim.withDefaults()
	lr := &io.LimitedReader{R: r, N: lim.MaxBytes + 1}
	dec := json.NewDecoder(lr)
	dec.UseNumber()
	var (
		events []Event
		seen   = map[string]bool{}
		value  int
		read   int // events read, duplicates included
	)
	add := func(raw json.RawMessage, where string) error {
		if read++; read > lim.MaxEvents {
			return fmt.Errorf("%w: more than %d events; split it by time (Stripe: created[gte], created[lt])", ErrTooLarge, lim.MaxEvents)
		}
		ev, err := readEvent(raw, key)
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if seen[ev.Key] {
			return nil
		}
		seen[ev.Key] = true
		ev.Index = len(events) + 1
		events = append(events, ev)
		return nil
	}
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if lr.N <= 0 {
			return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, lim.MaxBytes)
		}
		value++
		if err != nil {
			return nil, fmt.Errorf("JSON value %d: %w", value, err)
		}
		page, isPage, err := listPage(raw)
		if err != nil {
			return nil, fmt.Errorf("JSON value %d: %w", value, err)
		}
		if !isPage {
			if err := add(raw, fmt.Sprintf("JSON value %d", value)); err != nil {
				return nil, err
			}
			continue
		}
		for i, item := range page {
			if err := add(item, fmt.Sprintf("JSON value %d (a list page), data[%d]", value, i)); err != nil {
				return nil, err
			}
		}
	}
	if lr.N <= 0 {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, lim.MaxBytes)
	}
	return events, nil
}

// listPage returns the data of a Stripe list page, or isPage false when raw
// is not one.
func listPage(raw json.RawMessage) (data []json.RawMessage, isPage bool, err error) {
	var head struct {
		Object string            `json:"object"`
		Data   []json.RawMessage `json:"data"`
	}
	if !bytes.HasPrefix(bytes.TrimLeft(raw, " \t\r\n"), []byte("{")) {
		return nil, false, errors.New("want an event object or a list page ({\"object\": \"list\", \"data\": [...]}), not " + firstByte(raw))
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		// The value is an object; a field of an unexpected type (an event
		// whose data is an object) is no list page.
		return nil, false, nil
	}
	if head.Object != "list" {
		return nil, false, nil
	}
	if head.Data == nil {
		return nil, true, errors.New(`a list page without "data"`)
	}
	return head.Data, true, nil
}

func firstByte(raw json.RawMessage) string {
	s := strings.TrimLeft(string(raw), " \t\r\n")
	switch {
	case s == "":
		return "nothing"
	case s[0] == '[':
		return "an array"
	case s[0] == '"':
		return "a string"
	default:
		return "a " + strconv.Quote(s[:1]) + " value"
	}
}

// readEvent keys one event and reads what a person needs to recognise it.
func readEvent(raw json.RawMessage, key KeyFunc) (Event, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return Event{}, errors.New("an event must be a JSON object, not " + firstByte(raw))
	}
	k, err := key(raw)
	if err != nil {
		return Event{}, err
	}
	ev := Event{Key: k}
	// An Adyen notification as delivered holds one NotificationRequestItem:
	// read its names.
	if items, ok := fields["notificationItems"]; ok {
		var wrapped []struct {
			Item map[string]json.RawMessage `json:"NotificationRequestItem"`
		}
		if json.Unmarshal(items, &wrapped) == nil && len(wrapped) > 0 && wrapped[0].Item != nil {
			fields = wrapped[0].Item
		}
	}
	ev.ID = firstString(fields, "id", "eventId", "event_id", "pspReference")
	ev.Type = firstString(fields, "type", "eventType", "event_type", "eventCode")
	ev.Created = firstTime(fields, "created", "created_at", "createdAt", "create_time", "eventDate", "timestamp")
	return ev, nil
}

// firstString is the first of names that fields holds as a string.
func firstString(fields map[string]json.RawMessage, names ...string) string {
	for _, n := range names {
		var s string
		if v, ok := fields[n]; ok && json.Unmarshal(v, &s) == nil && s != "" {
			return s
		}
	}
	return ""
}

// firstTime is the first of names that fields holds as a time: Unix seconds
// (Stripe's created) or an RFC 3339 string (Square, PayPal, Adyen).
func firstTime(fields map[string]json.RawMessage, names ...string) time.Time {
	for _, n := range names {
		v, ok := fields[n]
		if !ok {
			continue
		}
		var num json.Number
		if json.Unmarshal(v, &num) == nil {
			if secs, err := num.Int64(); err == nil && secs > 0 {
				return time.Unix(secs, 0).UTC()
			}
		}
		var s string
		if json.Unmarshal(v, &s) == nil {
			if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
				return t.UTC()
			}
		}
	}
	return time.Time{}
}

// FilterTypes keeps the events whose Type matches one of patterns: a type
// ("charge.succeeded"), or a prefix and * ("charge.*", "*"). No patterns
// keep every event. A provider's list holds every event of the account,
// those no webhook endpoint subscribes to included (Stripe's /v1/events
// does): those were never meant to be delivered.
func FilterTypes(events []Event, patterns []string) []Event {
	if len(patterns) == 0 {
		return events
	}
	var out []Event
	for _, e := range events {
		for _, p := range patterns {
			if prefix, wild := strings.CutSuffix(p, "*"); (wild && strings.HasPrefix(e.Type, prefix)) || e.Type == p {
				out = append(out, e)
				break
			}
		}
	}
	return out
}
