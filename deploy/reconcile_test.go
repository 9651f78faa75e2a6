package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// checkReconcileCronJob: claimd reconcile on a schedule, one run at a time
// and never retried (exit 1 is a finding), its arguments flags that claimd
// reconcile takes, reaching the release's Service over TLS with the CA and
// a client certificate mounted, its token and the Stripe key from Secrets
// only, and the events handed from the init container in a volume.
func checkReconcileCronJob(t *testing.T, m manifest, vs valueSet) {
	t.Helper()
	spec := get(m, "spec")
	if get(spec, "concurrencyPolicy") != "Forbid" || get(spec, "jobTemplate", "spec", "backoffLimit") != 0 {
		t.Errorf("CronJob concurrencyPolicy %v, backoffLimit %v; want Forbid and 0 (a run that finds mismatches exits 1, and a retry repeats it)",
			get(spec, "concurrencyPolicy"), get(spec, "jobTemplate", "spec", "backoffLimit"))
	}
	pod := get(spec, "jobTemplate", "spec", "template", "spec")
	if get(pod, "restartPolicy") != "Never" || get(pod, "securityContext", "runAsNonRoot") != true {
		t.Errorf("reconcile pod restartPolicy %v, runAsNonRoot %v; want Never, true", get(pod, "restartPolicy"), get(pod, "securityContext", "runAsNonRoot"))
	}
	c := get(pod, "containers", 0)
	init := get(pod, "initContainers", 0)
	checkContainerSecurity(t, "reconcile", c)
	checkContainerSecurity(t, "fetch", init)
	args := strs(t, get(c, "args"))
	checkArgs(t, "reconcile", args)
	checkFilesMounted(t, pod)
	for _, want := range []string{
		"--address=claimd.default.svc:50051", "--namespace=billing", "--provider=stripe", "--events=/events/events.json",
		"--pushgateway=http://pushgateway.monitoring.svc:9091", "--types=payment_intent.*,charge.*",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("reconcile args %v lack %s", args, want)
		}
	}
	if vs.tls {
		for _, want := range []string{"--ca-file=/etc/claimd/tls/ca.crt", "--cert-file=/etc/claimd/client-tls/tls.crt", "--key-file=/etc/claimd/client-tls/tls.key"} {
			if !slices.Contains(args, want) {
				t.Errorf("reconcile args %v lack %s", args, want)
			}
		}
	}
	for _, ctr := range []any{c, init} {
		for _, e := range get(ctr, "env").([]any) {
			name := get(e, "name").(string)
			secret := get(e, "valueFrom", "secretKeyRef", "name")
			if (name == "CLAIMD_TOKEN" || name == "STRIPE_API_KEY") != (secret != nil) {
				t.Errorf("env %s: from Secret %v; the token and the Stripe key come from Secrets, nothing else does", name, secret)
			}
		}
	}
	mounts := func(ctr any) string {
		for _, vm := range get(ctr, "volumeMounts").([]any) {
			if get(vm, "mountPath") == "/events" {
				return fmt.Sprint(get(vm, "name"))
			}
		}
		return ""
	}
	if mounts(init) != "events" || mounts(c) != "events" || get(pod, "volumes", 0, "emptyDir") == nil {
		t.Errorf("the events volume is not an emptyDir mounted at /events in both containers: %v", get(pod, "volumes"))
	}
	script, _ := get(init, "args", 0).(string)
	want, err := os.ReadFile(filepath.Join(chart, "files", "fetch-stripe-events.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if script != string(want) {
		t.Errorf("the init container does not run files/fetch-stripe-events.sh")
	}
}

// TestHelmReconcileRefuses: a reconcile job that could not run, or whose
// counts could reach no one, fails at helm template naming the value.
func TestHelmReconcileRefuses(t *testing.T) {
	ok := []string{"reconcile.enabled=true", "reconcile.namespace=billing", "reconcile.stripe.existingSecret=stripe",
		"reconcile.pushgateway=http://pgw:9091", "reconcile.clientCert.existingSecret=job-tls"}
	without := func(prefix string, more ...string) []string {
		var out []string
		for _, s := range ok {
			if !strings.HasPrefix(s, prefix) {
				out = append(out, s)
			}
		}
		return append(out, more...)
	}
	for _, tc := range []struct {
		desc string
		set  []string
		want string
	}{
		{"no namespace", without("reconcile.namespace"), "reconcile.namespace is required"},
		{"no events", without("reconcile.stripe"), "reconcile needs its events"},
		{"no Pushgateway", without("reconcile.pushgateway"), "reconcile.pushgateway is required"},
		{"no client certificate with tls.clientCA", without("reconcile.clientCert"), "reconcile.clientCert.existingSecret is required with tls.clientCA"},
		{"too many types", append(slices.Clone(ok), "reconcile.stripe.types={a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q,r,s,t,u}"), "more than 20 types"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			_, err := helmTemplate(chart, helmArgs{set: tc.set})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("helm template --set %v error = %v, want one containing %q", tc.set, err, tc.want)
			}
		})
	}
	// A container of one's own instead of Stripe's, on a plaintext dev
	// release: its command runs, and the job connects in plaintext.
	ms := render(t, helmArgs{valueFiles: []string{"helm/values/dev.yaml"}, set: without("reconcile.stripe",
		"reconcile.fetch.image=registry.example/adyen-export:1", "reconcile.fetch.command={/export,--out,/events/events.json}", "reconcile.provider=adyen")})
	cj := find(t, ms, "CronJob", "-reconcile")
	pod := get(cj, "spec", "jobTemplate", "spec", "template", "spec")
	if got := strs(t, get(pod, "initContainers", 0, "command")); !slices.Equal(got, []string{"/export", "--out", "/events/events.json"}) {
		t.Errorf("fetch container command = %v", got)
	}
	args := strs(t, get(pod, "containers", 0, "args"))
	checkArgs(t, "reconcile", args)
	if !slices.Contains(args, "--plaintext") || !slices.Contains(args, "--provider=adyen") || slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--types") }) {
		t.Errorf("reconcile args on a plaintext release with a fetch container = %v, want --plaintext, --provider=adyen, no --types", args)
	}
}

// TestFetchStripeEvents runs files/fetch-stripe-events.sh, as the CronJob's
// init container does, against a stand-in for Stripe's API that serves the
// fixture's three pages: it authenticates with the key, asks for 100
// events a page created in the last SINCE_HOURS of the types given, follows
// has_more with starting_after, and writes the pages one after another.
func TestFetchStripeEvents(t *testing.T) {
	for _, tool := range []string{"sh", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to run the fetch script (the init container's image has both): %v", tool, err)
		}
	}
	raw, err := os.ReadFile("../internal/reconcile/testdata/stripe_events_pages.json")
	if err != nil {
		t.Fatal(err)
	}
	var pages []json.RawMessage
	var lastIDs []string
	dec := json.NewDecoder(bytes.NewReader(raw))
	for dec.More() {
		var p json.RawMessage
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		var page struct{ Data []struct{ ID string } }
		if err := json.Unmarshal(p, &page); err != nil {
			t.Fatal(err)
		}
		pages = append(pages, p)
		lastIDs = append(lastIDs, page.Data[len(page.Data)-1].ID)
	}
	var (
		mu       sync.Mutex
		requests []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		user, pass, _ := r.BasicAuth()
		mu.Lock()
		requests = append(requests, fmt.Sprintf("%s %s user=%s pass=%q limit=%s types=%v after=%s",
			r.Method, r.URL.Path, user, pass, q.Get("limit"), q["types[]"], q.Get("starting_after")))
		mu.Unlock()
		since, err := strconv.ParseInt(q.Get("created[gte]"), 10, 64)
		if d := time.Since(time.Unix(since, 0)); err != nil || d < 84*time.Hour-time.Minute || d > 84*time.Hour+time.Minute {
			http.Error(w, "created[gte] is not 84h ago", http.StatusBadRequest)
			return
		}
		i := 0
		if after := q.Get("starting_after"); after != "" {
			i = slices.Index(lastIDs, after) + 1
			if i == 0 {
				http.Error(w, "unknown starting_after", http.StatusBadRequest)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(pages[i])
	}))
	defer srv.Close()

	out := filepath.Join(t.TempDir(), "events.json")
	cmd := exec.Command("sh", filepath.Join(chart, "files", "fetch-stripe-events.sh"))
	cmd.Env = append(os.Environ(), "STRIPE_API_KEY=rk_test_reconcile", "STRIPE_API="+srv.URL, "OUT="+out, "TYPES=payment_intent.* charge.*")
	if b, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(b), "3 pages of events") {
		t.Fatalf("fetch-stripe-events.sh: %v\n%s", err, b)
	}
	want := []string{
		`GET /v1/events user=rk_test_reconcile pass="" limit=100 types=[payment_intent.* charge.*] after=`,
		`GET /v1/events user=rk_test_reconcile pass="" limit=100 types=[payment_intent.* charge.*] after=` + lastIDs[0],
		`GET /v1/events user=rk_test_reconcile pass="" limit=100 types=[payment_intent.* charge.*] after=` + lastIDs[1],
	}
	if diff := cmp.Diff(want, requests); diff != "" {
		t.Errorf("requests to the Stripe stand-in (-want +got):\n%s", diff)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, p := range pages {
		b.Write(p)
		b.WriteByte('\n')
	}
	if string(got) != b.String() {
		t.Errorf("the script wrote %d bytes, want the three pages one after another (%d bytes)", len(got), b.Len())
	}
	// The key goes to curl on stdin, never on a command line.
	script, _ := os.ReadFile(filepath.Join(chart, "files", "fetch-stripe-events.sh"))
	if strings.Contains(string(script), "-u \"$STRIPE_API_KEY") || strings.Contains(string(script), "Bearer $STRIPE_API_KEY") {
		t.Error("fetch-stripe-events.sh puts the key on curl's command line")
	}
}
