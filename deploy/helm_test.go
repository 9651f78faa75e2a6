// Package deploy_test checks the Helm chart under deploy/helm/claimd: helm
// lint --strict and helm template with each value set in deploy/helm/values,
// with helm's default capabilities (no --kube-version), then assertions on
// the rendered manifests that a reviewer would otherwise check by eye
// (probes, a non-root read-only container, secrets only from Secrets, flags
// and values claimd really takes, the helm test hook). helm runs in process
// (helmcli_test.go); claimd is built from the checkout to read its flags.
package deploy_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
	"helm.sh/helm/v3/pkg/chartutil"
)

const chart = "helm/claimd"

// manifest is one rendered object.
type manifest = map[string]any

func kind(m manifest) string { s, _ := m["kind"].(string); return s }

// get walks m by keys and list indexes ("spec", "template", 0 …).
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			mm, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = mm[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// strs returns v, a list of strings, as []string.
func strs(t *testing.T, v any) []string {
	t.Helper()
	l, ok := v.([]any)
	if !ok {
		t.Fatalf("%v is not a list", v)
	}
	out := make([]string, len(l))
	for i, e := range l {
		if out[i], ok = e.(string); !ok {
			t.Fatalf("%v: %v is not a string", v, e)
		}
	}
	return out
}

func render(t *testing.T, a helmArgs) []manifest {
	t.Helper()
	out, err := helmTemplate(chart, a)
	if err != nil {
		t.Fatalf("helm template %+v: %v", a, err)
	}
	var ms []manifest
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var m manifest
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("rendered manifests are not YAML: %v", err)
		}
		if m != nil {
			ms = append(ms, m)
		}
	}
	return ms
}

// find returns the one rendered object of kind k whose name ends in suffix.
func find(t *testing.T, ms []manifest, k, suffix string) manifest {
	t.Helper()
	var found []manifest
	for _, m := range ms {
		if name, _ := get(m, "metadata", "name").(string); kind(m) == k && strings.HasSuffix(name, suffix) {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d %s objects named *%s rendered, want 1", len(found), k, suffix)
	}
	return found[0]
}

// valueSet is one way to install the chart, and what it must render.
type valueSet struct {
	desc  string
	files []string
	tls   bool     // TLS on the listeners: probes cannot use gRPC
	kinds []string // every kind rendered, sorted, with repeats
}

var valueSets = []valueSet{
	{"defaults: TLS, mTLS, auth file, Redis+PostgreSQL", nil, true,
		[]string{"Deployment", "HorizontalPodAutoscaler", "Job", "Pod", "PodDisruptionBudget", "Service", "Service", "ServiceAccount"}},
	{"dev: insecure, Redis Cluster, providers file, monitoring", []string{"helm/values/dev.yaml"}, false,
		[]string{"ConfigMap", "Deployment", "Job", "Pod", "PodDisruptionBudget", "PrometheusRule", "Service", "Service", "ServiceAccount", "ServiceMonitor"}},
	{"PostgreSQL only, fixed replicas", []string{"helm/values/postgres-only.yaml"}, true,
		[]string{"Deployment", "Pod", "Service", "ServiceAccount"}},
	{"mTLS scraping and alerts", []string{"helm/values/mtls-monitoring.yaml"}, true,
		[]string{"Deployment", "HorizontalPodAutoscaler", "Job", "Pod", "PodDisruptionBudget", "PrometheusRule", "Service", "Service", "ServiceAccount", "ServiceMonitor"}},
	{"reconcile CronJob: Stripe events, mTLS, Pushgateway", []string{"helm/values/reconcile.yaml"}, true,
		[]string{"CronJob", "Deployment", "HorizontalPodAutoscaler", "Job", "Pod", "PodDisruptionBudget", "Service", "Service", "ServiceAccount"}},
}

// TestHelmChart lints the chart and renders it with each value set, as
// `helm lint --strict` and `helm template` do with helm's defaults: no
// --kube-version, so the chart must not demand a Kubernetes newer than the
// 1.20 helm assumes when it is not told.
func TestHelmChart(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.desc, func(t *testing.T) {
			a := helmArgs{valueFiles: vs.files}
			failed, err := helmLint(chart, a)
			if err != nil {
				t.Fatalf("helm lint: %v", err)
			}
			for _, m := range failed {
				t.Errorf("helm lint --strict: %v", m)
			}
			ms := render(t, a)
			var kinds []string
			for _, m := range ms {
				kinds = append(kinds, kind(m))
			}
			sort.Strings(kinds)
			if diff := cmp.Diff(vs.kinds, kinds); diff != "" {
				t.Errorf("rendered kinds (-want +got):\n%s", diff)
			}
			for _, m := range ms {
				switch kind(m) {
				case "Deployment":
					checkDeployment(t, m, vs)
				case "Job":
					checkMigrateJob(t, m)
				case "CronJob":
					checkReconcileCronJob(t, m, vs)
				case "Pod":
					checkTestPod(t, m, vs)
				case "ConfigMap":
					checkConfigMap(t, m)
				case "PrometheusRule":
					checkPrometheusRule(t, m)
				case "Secret":
					t.Errorf("the chart renders a Secret %v: secrets come from existing Secrets only", get(m, "metadata", "name"))
				}
			}
		})
	}
}

// checkDeployment: probes on /readyz or grpc.health.v1, a non-root,
// read-only container, tier URLs only from Secrets, requests set, and
// arguments claimd serve takes.
func checkDeployment(t *testing.T, m manifest, vs valueSet) {
	t.Helper()
	pod := get(m, "spec", "template", "spec")
	c := get(pod, "containers", 0)
	if get(pod, "securityContext", "runAsNonRoot") != true {
		t.Error("pod securityContext.runAsNonRoot is not true")
	}
	checkContainerSecurity(t, "claimd", c)

	// helm's default Kubernetes (1.20) predates the gRPC probe (GA in
	// 1.27): readiness reads /readyz there; TestHelmReadinessProbe covers
	// newer versions.
	ready := get(c, "readinessProbe")
	scheme := map[bool]string{true: "HTTPS", false: "HTTP"}[vs.tls]
	if get(ready, "httpGet", "path") != "/readyz" || get(ready, "httpGet", "scheme") != scheme || get(ready, "grpc") != nil {
		t.Errorf("readinessProbe at Kubernetes 1.20 = %v, want %s GET /readyz", ready, scheme)
	}
	if live := get(c, "livenessProbe"); get(live, "httpGet", "path") != "/healthz" {
		t.Errorf("livenessProbe = %v, want GET /healthz, which does not follow the durable tier", live)
	}

	for _, e := range get(c, "env").([]any) {
		name := get(e, "name")
		if get(e, "value") != nil {
			t.Errorf("env %v has a literal value: tier URLs hold passwords and come from Secrets", name)
		}
		if get(e, "valueFrom", "secretKeyRef", "name") == nil {
			t.Errorf("env %v is not read from a Secret", name)
		}
	}
	if get(c, "resources", "requests", "cpu") == nil || get(c, "resources", "requests", "memory") == nil {
		t.Error("container has no CPU or memory request")
	}

	args := strs(t, get(c, "args"))
	checkArgs(t, "serve", args)
	checkFilesMounted(t, pod)
	if vs.tls {
		for _, want := range []string{"--tls-cert=", "--tls-key=", "--tls-client-ca=", "--auth-file="} {
			if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, want) }) {
				t.Errorf("args %v lack %s…", args, want)
			}
		}
	}
}

func checkContainerSecurity(t *testing.T, name string, c any) {
	t.Helper()
	sc := get(c, "securityContext")
	for key, want := range map[string]any{"runAsNonRoot": true, "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false, "runAsUser": 65532} {
		if got := get(sc, key); got != want {
			t.Errorf("%s container securityContext.%s = %v, want %v", name, key, got, want)
		}
	}
	if drop := get(sc, "capabilities", "drop", 0); drop != "ALL" {
		t.Errorf("%s container capabilities.drop = %v, want [ALL]", name, drop)
	}
}

func checkMigrateJob(t *testing.T, m manifest) {
	t.Helper()
	hook, _ := get(m, "metadata", "annotations", "helm.sh/hook").(string)
	if !strings.Contains(hook, "pre-install") || !strings.Contains(hook, "pre-upgrade") {
		t.Errorf("migrate Job hook = %q, want pre-install and pre-upgrade", hook)
	}
	c := get(m, "spec", "template", "spec", "containers", 0)
	checkArgs(t, "migrate", strs(t, get(c, "args")))
	checkContainerSecurity(t, "migrate", c)
}

// checkTestPod: `helm test` runs a Pod that GETs /readyz through the
// release's Service, verifying the server with the TLS Secret's CA.
func checkTestPod(t *testing.T, m manifest, vs valueSet) {
	t.Helper()
	if hook := get(m, "metadata", "annotations", "helm.sh/hook"); hook != "test" {
		t.Errorf("Pod %v hook = %v, want test (only helm test creates it)", get(m, "metadata", "name"), hook)
	}
	pod := get(m, "spec")
	if get(pod, "restartPolicy") != "Never" {
		t.Errorf("test Pod restartPolicy = %v, want Never (a failure must fail helm test)", get(pod, "restartPolicy"))
	}
	c := get(pod, "containers", 0)
	checkContainerSecurity(t, "test", c)
	args := strs(t, get(c, "args"))
	url := "http://claimd.default.svc:8080/readyz"
	if vs.tls {
		url = "https://claimd.default.svc:8080/readyz"
		i := slices.Index(args, "--cacert")
		if i < 0 || i+1 >= len(args) || args[i+1] != "/etc/claimd/tls/ca.crt" {
			t.Errorf("test Pod args %v lack --cacert /etc/claimd/tls/ca.crt", args)
		}
		if get(c, "volumeMounts", 0, "mountPath") != "/etc/claimd/tls" || get(pod, "volumes", 0, "secret", "secretName") != "claimd-tls" {
			t.Errorf("test Pod does not mount the TLS Secret's CA at /etc/claimd/tls: %v", get(pod, "volumes"))
		}
	} else if slices.Contains(args, "--cacert") || slices.Contains(args, "--insecure") || slices.Contains(args, "-k") {
		t.Errorf("test Pod args %v: a plaintext release needs no CA and no --insecure", args)
	}
	if len(args) == 0 || args[len(args)-1] != url || !slices.Contains(args, "--fail") {
		t.Errorf("test Pod args = %v, want curl --fail … %s", args, url)
	}
}

// passwordURL matches a URL with user info that carries a password.
var passwordURL = regexp.MustCompile(`[a-z]+://[^/\s:@]*:[^/\s@]+@`)

// checkConfigMap: the only ConfigMap holds providers.yaml, a registry
// claimd loads (claimd providers --check), and nothing that looks like a
// credential.
func checkConfigMap(t *testing.T, m manifest) {
	t.Helper()
	data, _ := get(m, "data").(map[string]any)
	var keys []string
	for k := range data {
		keys = append(keys, k)
	}
	if !slices.Equal(keys, []string{"providers.yaml"}) {
		t.Fatalf("ConfigMap %v keys = %v, want only providers.yaml", get(m, "metadata", "name"), keys)
	}
	text := data["providers.yaml"].(string)
	file := filepath.Join(t.TempDir(), "providers.yaml")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(claimd(t), "providers", "--check", file).CombinedOutput(); err != nil {
		t.Errorf("ConfigMap providers.yaml does not load: claimd providers --check: %v\n%s", err, out)
	}
	lower := strings.ToLower(text)
	for _, bad := range []string{"password", "secret", "token", "-----begin"} {
		if strings.Contains(lower, bad) {
			t.Errorf("ConfigMap providers.yaml mentions %q: secrets belong in Secrets", bad)
		}
	}
	if passwordURL.MatchString(text) {
		t.Error("ConfigMap providers.yaml holds a URL with a password")
	}
}

// checkPrometheusRule: the rules are deploy/prometheus/alerts.yaml's.
func checkPrometheusRule(t *testing.T, m manifest) {
	t.Helper()
	raw, err := os.ReadFile("prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := yaml.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want["groups"], get(m, "spec", "groups")); diff != "" {
		t.Errorf("PrometheusRule groups differ from deploy/prometheus/alerts.yaml (-want +got):\n%s", diff)
	}
}

// TestHelmAlertsCopy: the chart can only read files inside itself, so it
// carries a copy of deploy/prometheus/alerts.yaml, which must stay equal.
func TestHelmAlertsCopy(t *testing.T) {
	want, err := os.ReadFile("prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(chart, "files", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(got) {
		t.Fatalf("%s/files/alerts.yaml differs from prometheus/alerts.yaml: cp deploy/prometheus/alerts.yaml deploy/helm/claimd/files/", chart)
	}
}

// TestHelmReadinessProbe: the native gRPC probe where kubelet has it
// (1.27 and later) and the listeners are plaintext; /readyz otherwise.
func TestHelmReadinessProbe(t *testing.T) {
	tests := []struct {
		desc        string
		files       []string
		kubeVersion string
		want        map[string]any
	}{
		{"plaintext, helm's default 1.20", []string{"helm/values/dev.yaml"}, "",
			map[string]any{"httpGet": map[string]any{"path": "/readyz", "port": "http", "scheme": "HTTP"}}},
		{"plaintext, 1.26", []string{"helm/values/dev.yaml"}, "1.26.3",
			map[string]any{"httpGet": map[string]any{"path": "/readyz", "port": "http", "scheme": "HTTP"}}},
		{"plaintext, 1.27", []string{"helm/values/dev.yaml"}, "1.27.0",
			map[string]any{"grpc": map[string]any{"port": 50051, "service": "idempotency.v1.ClaimService"}}},
		{"TLS, 1.30", nil, "1.30.0",
			map[string]any{"httpGet": map[string]any{"path": "/readyz", "port": "http", "scheme": "HTTPS"}}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			dep := find(t, render(t, helmArgs{valueFiles: tc.files, kubeVersion: tc.kubeVersion}), "Deployment", "claimd")
			got, _ := get(dep, "spec", "template", "spec", "containers", 0, "readinessProbe").(map[string]any)
			delete(got, "periodSeconds")
			delete(got, "failureThreshold")
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("readinessProbe (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHelmValuesToFlags: each value for a claimd flag reaches the command
// that takes it, and only that one: serve (the Deployment) or migrate (the
// Job), or both where they must agree (the schema) or should (the log).
// Every rendered argument must be a flag of its command with a value of the
// flag's type.
func TestHelmValuesToFlags(t *testing.T) {
	tests := []struct {
		desc        string
		set         []string
		values      string   // a values file, for numbers as YAML parses them
		serve, migr []string // arguments that must be present
		notServe    []string // argument prefixes that must be absent
		notMigr     []string
	}{
		{desc: "defaults leave claimd's own",
			notServe: []string{"--postgres-schema", "--log-", "--require-noeviction", "--http-api", "--reflection", "--max-request-bytes", "--janitor-interval", "--grace", "--retention", "--batch"},
			notMigr:  []string{"--postgres-schema", "--log-"}},
		{desc: "postgres.schema: serve and migrate",
			set:   []string{"postgres.schema=tenant_a"},
			serve: []string{"--postgres-schema=tenant_a"}, migr: []string{"--postgres-schema=tenant_a"}},
		{desc: "log: serve and migrate",
			set:   []string{"log.level=debug", "log.format=text"},
			serve: []string{"--log-level=debug", "--log-format=text"}, migr: []string{"--log-level=debug", "--log-format=text"}},
		{desc: "redis.fastTierKey: the Secret's key file seals the fast tier, on serve only",
			serve: []string{"--fast-tier-key-file=/etc/claimd/fast-tier-key/fast-tier.key"}, notMigr: []string{"--fast-tier-key-file"}},
		{desc: "no Redis: no fast-tier key",
			set:      []string{"redis.existingSecret="},
			notServe: []string{"--fast-tier-key-file"}},
		{desc: "redis.requireNoEviction",
			set:   []string{"redis.requireNoEviction=true"},
			serve: []string{"--require-noeviction"}, notMigr: []string{"--require-noeviction"}},
		{desc: "httpAPI and reflection off",
			set:   []string{"httpAPI=false", "reflection=false"},
			serve: []string{"--http-api=false", "--reflection=false"}, notServe: []string{"--http-allowed-hosts"}},
		{desc: "the HTTP API answers the Service's names and loopback's",
			serve:   []string{"--http-allowed-hosts=localhost,127.0.0.1,::1,claimd,claimd.default,claimd.default.svc,claimd.default.svc.cluster.local"},
			notMigr: []string{"--http-allowed-hosts"}},
		{desc: "httpAllowedHosts adds names",
			set:   []string{"httpAllowedHosts={claimd.example.com,api.example.com}"},
			serve: []string{"--http-allowed-hosts=localhost,127.0.0.1,::1,claimd,claimd.default,claimd.default.svc,claimd.default.svc.cluster.local,claimd.example.com,api.example.com"}},
		{desc: "maxRequestBytes and janitor.batch from a values file",
			values: "maxRequestBytes: 8388608\njanitor:\n  batch: 5000\n",
			serve:  []string{"--max-request-bytes=8388608", "--batch=5000"}},
		{desc: "maxRequestBytes from --set",
			set:   []string{"maxRequestBytes=16777216"},
			serve: []string{"--max-request-bytes=16777216"}},
		{desc: "janitor",
			set:   []string{"janitor.interval=0s", "janitor.grace=2h", "janitor.retention=2160h"},
			serve: []string{"--janitor-interval=0s", "--grace=2h", "--retention=2160h"}, notMigr: []string{"--grace", "--retention"}},
		{desc: "redis.tls: a CA and a client certificate",
			set:     []string{"redis.tls.existingSecret=claimd-redis-tls", "redis.tls.clientCert=true"},
			serve:   []string{"--redis-ca=/etc/claimd/redis-tls/ca.crt", "--redis-cert=/etc/claimd/redis-tls/tls.crt", "--redis-key=/etc/claimd/redis-tls/tls.key"},
			notMigr: []string{"--redis"}},
		{desc: "redis.tls: a client certificate, the system roots",
			set:      []string{"redis.tls.existingSecret=claimd-redis-tls", "redis.tls.ca=false", "redis.tls.clientCert=true"},
			serve:    []string{"--redis-cert=/etc/claimd/redis-tls/tls.crt", "--redis-key=/etc/claimd/redis-tls/tls.key"},
			notServe: []string{"--redis-ca"}},
		{desc: "extraArgs and migrate.extraArgs removed (null)",
			set: []string{"extraArgs=null", "migrate.extraArgs=null"}},
		{desc: "extraArgs: serve only; migrate.extraArgs: migrate only",
			set:   []string{"extraArgs={--horizon-review-age=2160h}", "migrate.extraArgs={--partition-claims=16}"},
			serve: []string{"--horizon-review-age=2160h"}, migr: []string{"--partition-claims=16"},
			notServe: []string{"--partition-claims"}, notMigr: []string{"--horizon-review-age"}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			a := helmArgs{set: tc.set}
			if tc.values != "" {
				f := filepath.Join(t.TempDir(), "values.yaml")
				if err := os.WriteFile(f, []byte(tc.values), 0o600); err != nil {
					t.Fatal(err)
				}
				a.valueFiles = []string{f}
			}
			failed, err := helmLint(chart, a)
			if err != nil || len(failed) > 0 {
				t.Errorf("helm lint --strict: %v %v", err, failed)
			}
			ms := render(t, a)
			dep := find(t, ms, "Deployment", "claimd")
			checkFilesMounted(t, get(dep, "spec", "template", "spec"))
			serve := strs(t, get(dep, "spec", "template", "spec", "containers", 0, "args"))
			migr := strs(t, get(find(t, ms, "Job", "-migrate"), "spec", "template", "spec", "containers", 0, "args"))
			checkArgs(t, "serve", serve)
			checkArgs(t, "migrate", migr)
			for _, c := range []struct {
				cmd       string
				args      []string
				want, not []string
			}{{"serve", serve, tc.serve, tc.notServe}, {"migrate", migr, tc.migr, tc.notMigr}} {
				for _, w := range c.want {
					if !slices.Contains(c.args, w) {
						t.Errorf("%s args = %v, want %s", c.cmd, c.args, w)
					}
				}
				for _, n := range c.not {
					if slices.ContainsFunc(c.args, func(a string) bool { return strings.HasPrefix(a, n) }) {
						t.Errorf("%s args = %v, want none starting %s", c.cmd, c.args, n)
					}
				}
			}
		})
	}
}

// TestHelmRefuses: value sets claimd would refuse at start, and clusters
// that lack an API the chart renders, fail at helm template (or install),
// naming the value to set.
func TestHelmRefuses(t *testing.T) {
	tests := []struct {
		desc string
		a    helmArgs
		want string
	}{
		{"no PostgreSQL", helmArgs{set: []string{"postgres.existingSecret="}}, "postgres.existingSecret is required"},
		{"no TLS, not insecure", helmArgs{set: []string{"tls.existingSecret="}}, "tls.existingSecret is required"},
		{"TLS without client certificates", helmArgs{set: []string{"tls.clientCA=false"}}, "tls.clientCA is required"},
		{"Redis TLS without Redis", helmArgs{set: []string{"redis.existingSecret=", "redis.tls.existingSecret=claimd-redis-tls"}}, "redis.tls.existingSecret needs redis.existingSecret"},
		{"Redis without a fast-tier key, not insecure", helmArgs{set: []string{"redis.fastTierKey.existingSecret="}}, "redis.fastTierKey.existingSecret is required"},
		{"schema in extraArgs", helmArgs{set: []string{"extraArgs={--postgres-schema=x}"}}, "set postgres.schema instead"},
		{"schema in migrate.extraArgs", helmArgs{set: []string{"migrate.extraArgs={-postgres-schema=x}"}}, "set postgres.schema instead"},
		// A cluster's discovery, as helm install sees it, without the API.
		{"no autoscaling/v2", helmArgs{apiVersions: chartutil.VersionSet{"v1", "apps/v1", "batch/v1", "policy/v1"}}, "autoscaling.enabled needs autoscaling/v2"},
		{"no policy/v1", helmArgs{apiVersions: chartutil.VersionSet{"v1", "apps/v1", "batch/v1", "autoscaling/v2"}}, "podDisruptionBudget.enabled needs policy/v1"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			_, err := helmTemplate(chart, tc.a)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("helm template %+v error = %v, want one containing %q", tc.a, err, tc.want)
			}
		})
	}
	// The same cluster without those APIs takes the chart with them off.
	ok := helmArgs{
		set:         []string{"autoscaling.enabled=false", "podDisruptionBudget.enabled=false"},
		apiVersions: chartutil.VersionSet{"v1", "apps/v1", "batch/v1"},
	}
	if _, err := helmTemplate(chart, ok); err != nil {
		t.Errorf("helm template %+v: %v", ok, err)
	}
}

// checkFilesMounted: every file a flag of a pod's (first) container names
// is in a volume mounted there; a Secret's is readable by its owner and
// group alone (claimd refuses a secret file other users may read).
func checkFilesMounted(t *testing.T, pod any) {
	t.Helper()
	c := get(pod, "containers", 0)
	volumes := map[string]any{}
	for _, v := range get(pod, "volumes").([]any) {
		volumes[get(v, "name").(string)] = v
	}
	for _, a := range strs(t, get(c, "args")) {
		_, file, _ := strings.Cut(a, "=")
		if !strings.HasPrefix(file, "/etc/claimd/") {
			continue
		}
		var vol any
		for _, m := range get(c, "volumeMounts").([]any) {
			if strings.HasPrefix(file, get(m, "mountPath").(string)+"/") {
				vol = volumes[get(m, "name").(string)]
			}
		}
		switch {
		case vol == nil:
			t.Errorf("arg %s: no volume is mounted at its directory", a)
		case get(vol, "secret") != nil && get(vol, "secret", "defaultMode") != 0o440:
			t.Errorf("arg %s: Secret volume %v has defaultMode %v, want 0440", a, get(vol, "name"), get(vol, "secret", "defaultMode"))
		}
	}
}

// The claimd binary the tests read flags from: built from the checkout
// once per test binary, into a directory TestMain removes.
var (
	buildOnce sync.Once
	claimdDir string
	claimdBin string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if claimdDir != "" {
		os.RemoveAll(claimdDir)
	}
	os.Exit(code)
}

// claimd returns the path of the claimd binary: $CLAIMD_BIN when set (as
// scripts/test-clients.sh sets it, built once for every suite), else a build
// of this checkout's, made the first time.
func claimd(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if claimdBin = os.Getenv("CLAIMD_BIN"); claimdBin != "" {
			return
		}
		if claimdDir, buildErr = os.MkdirTemp("", "claimd-deploy-test"); buildErr != nil {
			return
		}
		claimdBin = filepath.Join(claimdDir, "claimd")
		// The image's compile flags (scripts/rootfs.sh), as every build of
		// claimd in make test: one compile of the server for all of them.
		cmd := exec.Command("go", "build", "-trimpath", "-o", claimdBin, "./cmd/claimd")
		cmd.Dir = ".." // the server module
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("%w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("go build ./cmd/claimd: %v", buildErr)
	}
	return claimdBin
}

// flagKinds caches flagsOf per command.
var flagKinds sync.Map

// flagsOf returns the flags claimd CMD takes, from its --help, each with
// its value type (string, int, duration, …; "" for a bool).
func flagsOf(t *testing.T, cmd string) map[string]string {
	t.Helper()
	if f, ok := flagKinds.Load(cmd); ok {
		return f.(map[string]string)
	}
	out, _ := exec.Command(claimd(t), cmd, "-h").CombinedOutput()
	flags := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s+--([a-z0-9-]+)(?: ([a-zA-Z]+))?\s+CLAIMD_`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = m[2]
	}
	if _, ok := flags["config"]; !ok {
		t.Fatalf("claimd %s -h lists no --config flag:\n%s", cmd, out)
	}
	flagKinds.Store(cmd, flags)
	return flags
}

// checkArgs: args are claimd CMD and flags it takes, each with a value of
// its type.
func checkArgs(t *testing.T, cmd string, args []string) {
	t.Helper()
	if len(args) == 0 || args[0] != cmd {
		t.Fatalf("args = %v, want %s first", args, cmd)
	}
	flags := flagsOf(t, cmd)
	for _, a := range args[1:] {
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		typ, ok := flags[name]
		if !ok || !strings.HasPrefix(a, "-") {
			t.Errorf("arg %q: claimd %s has no flag --%s", a, cmd, name)
			continue
		}
		var err error
		switch {
		case typ == "" && hasVal:
			_, err = strconv.ParseBool(val)
		case typ == "":
		case !hasVal:
			err = errors.New("no value (the chart writes --flag=value)")
		case typ == "int":
			_, err = strconv.Atoi(val)
		case typ == "duration":
			_, err = time.ParseDuration(val)
		}
		if err != nil {
			t.Errorf("arg %q: not a value of claimd %s --%s (%s): %v", a, cmd, name, typ, err)
		}
	}
}
