package horizon_test

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/claimd/claimd/internal/horizon"
)

// corpusDir holds real deliveries of every provider and the manifest that
// names their sources and what each must key to.
const corpusDir = "testdata/deliveries"

type corpusManifest struct {
	Sources map[string]struct {
		Repo    string `yaml:"repo"`
		Licence string `yaml:"licence"`
		Commit  string `yaml:"commit"`
		URL     string `yaml:"url"`
	} `yaml:"sources"`
	Deliveries []corpusDelivery `yaml:"deliveries"`
}

type corpusDelivery struct {
	File        string            `yaml:"file"`
	Provider    string            `yaml:"provider"`
	Family      string            `yaml:"family"`
	Event       string            `yaml:"event"`
	Source      string            `yaml:"source"`
	Path        string            `yaml:"path"`
	Extract     string            `yaml:"extract"`
	Headers     map[string]string `yaml:"headers"`
	HeadersFrom string            `yaml:"headers_from"`
	Want        struct {
		Key      string `yaml:"key"`
		Source   string `yaml:"source"`
		Rule     string `yaml:"rule"`
		Fallback bool   `yaml:"fallback"`
	} `yaml:"want"`
}

// attempts are the per-attempt headers of each provider: what changes when it
// sends one event again (signatures over a timestamp, the timestamps, a
// transmission id). Two attempts of one delivery differ in all of them.
var attempts = map[string][2]map[string]string{
	"stripe": {
		{"Stripe-Signature": "t=1762000124,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd"},
		{"Stripe-Signature": "t=1762003724,v1=0a1ff7634d9ab3b95db5c9a2dfe9416e41502b283a80c7cf19632632f96e6620"},
	},
	"github": {
		{"X-Hub-Signature-256": "sha256=d57c68ca6f92289e6987922ff26938930f6e66a2d161ef06abdf1859230aa23c", "X-Hub-Signature": "sha1=7d38cdd689735b008b3c702edd92eea23791c5f6"},
		{"X-Hub-Signature-256": "sha256=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd", "X-Hub-Signature": "sha1=0c444abc1d12d0c444abc1d12d0c444abc1d12d0"},
	},
	"shopify": {
		{"X-Shopify-Hmac-Sha256": "XWmrwMey6OsLMeiZKwP4FppHH3cmAiiJJAweH5Jo4bM=", "X-Shopify-Triggered-At": "2026-10-30T13:55:24.812Z", "shopify-hmac-sha256": "XWmrwMey6OsLMeiZKwP4FppHH3cmAiiJJAweH5Jo4bM=", "shopify-triggered-at": "2026-10-30T13:55:24.812Z"},
		{"X-Shopify-Hmac-Sha256": "2kRE5qRU2tR+tBGlDwMEw2avJ7QM4ikPYD/PJ3bd9Og=", "X-Shopify-Triggered-At": "2026-10-30T14:25:24.812Z", "shopify-hmac-sha256": "2kRE5qRU2tR+tBGlDwMEw2avJ7QM4ikPYD/PJ3bd9Og=", "shopify-triggered-at": "2026-10-30T14:25:24.812Z"},
	},
	"standard-webhooks": {
		{"webhook-timestamp": "1762000124", "webhook-signature": "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4="},
		{"webhook-timestamp": "1762000429", "webhook-signature": "v1,uJGpvw6ykjXOd1A8PWSS0PZX2cDnNKkyyW5KiH0dTPk="},
	},
	"paypal": {
		{"Paypal-Transmission-Id": "69cd13f0-d67a-11e5-baa3-778b53f4ae55", "Paypal-Transmission-Time": "2026-10-30T13:55:25Z", "Paypal-Transmission-Sig": "K7DF5+hOyGS6v0xTZ9PkEO"},
		{"Paypal-Transmission-Id": "6f2a4b10-d67c-11e5-baa3-778b53f4ae55", "Paypal-Transmission-Time": "2026-10-30T14:25:25Z", "Paypal-Transmission-Sig": "uJGpvw6ykjXOd1A8PWSS0P"},
	},
	"twilio": {
		{"X-Twilio-Signature": "RSOYDt4T1cUTdK1PDd93/VVr8B8="},
		{"X-Twilio-Signature": "IK+Dwps556ElfBT0I3Rgjkr1wJU="},
	},
	"adyen": {
		{"HmacSignature": "coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0=", "Authorization": "Basic d2ViaG9vazpzZWNyZXQ="},
		{"HmacSignature": "CZErGCNQaSsxbaQfZaJlakqo7KPP+mIa8a+wx3yNs9A=", "Authorization": "Basic d2ViaG9vazpzZWNyZXQ="},
	},
	"square": {
		{"X-Square-Hmacsha256-Signature": "2kRE5qRU2tR+tBGlDwMEw2avJ7QM4ikPYD/PJ3bd9Og="},
		{"X-Square-Hmacsha256-Signature": "XWmrwMey6OsLMeiZKwP4FppHH3cmAiiJJAweH5Jo4bM="},
	},
	// Braintree signs inside the body (bt_signature), which it resends
	// unchanged; no header changes between attempts.
	"braintree": {{}, {}},
}

// attempt returns d's headers with the provider's per-attempt headers of
// attempt n laid over them; attempt 1 also lower-cases every name, as an
// HTTP/2 hop or a proxy does.
func attempt(d corpusDelivery, n int) map[string]string {
	h := maps.Clone(d.Headers)
	if h == nil {
		h = map[string]string{}
	}
	for k, v := range attempts[d.Provider][n] {
		for old := range h {
			if strings.EqualFold(old, k) {
				delete(h, old)
			}
		}
		h[k] = v
	}
	if n == 1 {
		lower := make(map[string]string, len(h))
		for k, v := range h {
			lower[strings.ToLower(k)] = v
		}
		h = lower
	}
	return h
}

func readManifest(t *testing.T) corpusManifest {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(corpusDir, "manifest.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m corpusManifest
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("manifest.yaml: %v", err)
	}
	return m
}

// TestCorpus derives the key of every delivery of the corpus, as the provider
// sent it and as its retry, and holds each to the manifest: the key, where it
// came from and which alternative of the rule found it; the same key when
// only the signature and timestamp headers changed (and header names changed
// case); one key per event and one event per key, per provider. No delivery
// falls back to the body hash: every family of the corpus has its rule, so
// claimd_key_fallback_total stays at zero on it.
func TestCorpus(t *testing.T) {
	r := mustDefault(t)
	m := readManifest(t)

	keyEvent := map[string]map[string]string{} // provider → key → event
	eventKey := map[string]map[string]string{} // provider → event → key
	count := map[string]int{}
	sources := map[string]map[horizon.KeySource]int{} // provider → where its keys came from
	for _, d := range m.Deliveries {
		var derived horizon.Derived // what claimd derived, whatever the manifest says
		t.Run(d.File, func(t *testing.T) {
			src, ok := m.Sources[d.Source]
			switch {
			case !ok:
				t.Fatalf("source %q is not among the manifest's sources", d.Source)
			case src.Repo == "" || src.Licence == "" || (src.Commit == "" && src.URL == ""):
				t.Fatalf("source %q lacks its repository, licence, or commit/URL", d.Source)
			case d.Path == "" || d.Extract == "" || d.Event == "" || d.Family == "":
				t.Fatalf("delivery lacks its path, extract, event or family")
			case len(d.Headers) > 0 && d.HeadersFrom == "" && d.Provider != "braintree":
				t.Fatalf("delivery has headers but does not say where they come from")
			case !strings.HasPrefix(d.File, d.Provider+"/"):
				t.Fatalf("file %s is not under its provider's directory %s/", d.File, d.Provider)
			}
			p := lookup(t, r, d.Provider)
			body, err := os.ReadFile(filepath.Join(corpusDir, d.File))
			if err != nil {
				t.Fatal(err)
			}
			var first horizon.Derived
			for n := range 2 {
				h := attempt(d, n)
				got, err := p.DeriveKey(horizon.NewDelivery(h, body))
				if err != nil {
					t.Fatalf("attempt %d: DeriveKey() error = %v", n, err)
				}
				if got.Key != d.Want.Key || got.Source.String() != d.Want.Source || got.Rule != d.Want.Rule || got.Fallback != d.Want.Fallback {
					t.Errorf("attempt %d: DeriveKey() = key %q, source %v, rule %q, fallback %v; want %q, %s, %q, %v",
						n, got.Key, got.Source, got.Rule, got.Fallback, d.Want.Key, d.Want.Source, d.Want.Rule, d.Want.Fallback)
				}
				if got.Fallback {
					t.Errorf("attempt %d: DeriveKey() fell back to the body hash: no alternative of %s's rule covers this family", n, d.Provider)
				}
				if n == 0 {
					first, derived = got, got
				} else if got != first {
					t.Errorf("a retry that changed only signature and timestamp headers keys %+v, the first attempt %+v", got, first)
				}
			}
			if d.Want.Rule != "" && !slices.ContainsFunc(p.Rule.Alternatives(), func(a horizon.Rule) bool { return a.String() == d.Want.Rule }) {
				t.Errorf("want.rule %q is not an alternative of %s's rule", d.Want.Rule, d.Provider)
			}
		})
		count[d.Provider]++
		if keyEvent[d.Provider] == nil {
			keyEvent[d.Provider], eventKey[d.Provider] = map[string]string{}, map[string]string{}
			sources[d.Provider] = map[horizon.KeySource]int{}
		}
		key := derived.Key
		if key == "" {
			continue // the subtest failed to derive one
		}
		sources[d.Provider][derived.Source]++
		if other, ok := keyEvent[d.Provider][key]; ok && other != d.Event {
			t.Errorf("%s: events %q and %q share the key %q", d.File, other, d.Event, key)
		}
		if other, ok := eventKey[d.Provider][d.Event]; ok && other != key {
			t.Errorf("%s: event %q has two keys, %q and %q", d.File, d.Event, other, key)
		}
		keyEvent[d.Provider][key], eventKey[d.Provider][d.Event] = d.Event, key
	}

	for _, p := range r.List() {
		if !p.IsGroup() && count[p.Name] == 0 {
			t.Errorf("provider %s has no delivery in the corpus", p.Name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(count)) {
		by := sources[name]
		t.Logf("corpus: %-17s %3d deliveries, %3d events; keyed by EVENT_ID %d, HEADER %d, BODY_FIELD %d, BODY_HASH %d",
			name, count[name], len(eventKey[name]), by[horizon.KeySourceEventID], by[horizon.KeySourceHeader],
			by[horizon.KeySourceBodyField], by[horizon.KeySourceBodyHash])
	}
}

// TestCorpusFilesAreListed: every file under a provider's directory is in the
// manifest, so none sits there unproven or without its source.
func TestCorpusFilesAreListed(t *testing.T) {
	listed := map[string]bool{}
	for _, d := range readManifest(t).Deliveries {
		if listed[d.File] {
			t.Errorf("manifest lists %s twice", d.File)
		}
		listed[d.File] = true
	}
	err := filepath.WalkDir(corpusDir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(corpusDir, path)
		rel = filepath.ToSlash(rel)
		if strings.Contains(rel, "/") && !listed[rel] {
			t.Errorf("%s is not in manifest.yaml", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
