// Package deploy_test checks the Helm chart under deploy/helm/claimd: helm
// lint and helm template with each value set in deploy/helm/values, then
// assertions on the rendered manifests that a reviewer would otherwise
// check by eye (probes, a non-root read-only container, secrets only from
// Secrets, flags claimd really has).
package deploy_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/claimd/claimd/internal/horizon"
)

const (
	chart = "helm/claimd"
	// kubeVersion is passed to helm template: helm built with go install
	// defaults to Kubernetes 1.20, older than the chart's floor (gRPC
	// probes are GA from 1.27).
	kubeVersion = "1.30.0"
)

// helmBinary finds helm on PATH (make test puts the tools cache there) or
// in the tools cache itself.
func helmBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	p := filepath.Join(cache, "claimd-tools", "bin", "helm")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("helm not found on PATH or at %s: run `make tools` (it installs the pinned helm)", p)
	}
	return p
}

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(helmBinary(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if err != nil {
		return out.String(), errors.New(strings.TrimSpace(errOut.String() + "\n" + out.String()))
	}
	return out.String(), nil
}

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

func render(t *testing.T, valueFiles ...string) []manifest {
	t.Helper()
	args := []string{"template", "claimd", chart, "--kube-version", kubeVersion}
	for _, f := range valueFiles {
		args = append(args, "-f", f)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
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

// valueSet is one way to install the chart, and what it must render.
type valueSet struct {
	desc  string
	files []string
	tls   bool     // TLS on the listeners: probes cannot use gRPC
	kinds []string // every kind rendered, sorted, with repeats
}

var valueSets = []valueSet{
	{"defaults: TLS, mTLS, auth file, Redis+PostgreSQL", nil, true,
		[]string{"Deployment", "HorizontalPodAutoscaler", "Job", "PodDisruptionBudget", "Service", "Service", "ServiceAccount"}},
	{"dev: insecure, Redis Cluster, providers file, monitoring", []string{"helm/values/dev.yaml"}, false,
		[]string{"ConfigMap", "Deployment", "Job", "PodDisruptionBudget", "PrometheusRule", "Service", "Service", "ServiceAccount", "ServiceMonitor"}},
	{"PostgreSQL only, fixed replicas", []string{"helm/values/postgres-only.yaml"}, true,
		[]string{"Deployment", "Service", "ServiceAccount"}},
	{"mTLS scraping and alerts", []string{"helm/values/mtls-monitoring.yaml"}, true,
		[]string{"Deployment", "HorizontalPodAutoscaler", "Job", "PodDisruptionBudget", "PrometheusRule", "Service", "Service", "ServiceAccount", "ServiceMonitor"}},
}

// TestHelmChart lints the chart and renders it with each value set.
func TestHelmChart(t *testing.T) {
	flags := serveFlags(t)
	for _, vs := range valueSets {
		t.Run(vs.desc, func(t *testing.T) {
			lint := []string{"lint", "--strict", chart, "--kube-version", kubeVersion}
			for _, f := range vs.files {
				lint = append(lint, "-f", f)
			}
			if out, err := helm(t, lint...); err != nil {
				t.Fatalf("helm lint: %v\n%s", err, out)
			}
			ms := render(t, vs.files...)
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
					checkDeployment(t, m, vs, flags)
				case "Job":
					checkMigrateJob(t, m)
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

// checkDeployment: probes on grpc.health.v1 (or /readyz over TLS), a
// non-root, read-only container, tier URLs only from Secrets, requests set,
// and every flag one claimd serve defines.
func checkDeployment(t *testing.T, m manifest, vs valueSet, flags map[string]bool) {
	t.Helper()
	pod := get(m, "spec", "template", "spec")
	c := get(pod, "containers", 0)
	if get(pod, "securityContext", "runAsNonRoot") != true {
		t.Error("pod securityContext.runAsNonRoot is not true")
	}
	sc := get(c, "securityContext")
	for key, want := range map[string]any{"runAsNonRoot": true, "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false, "runAsUser": 65532} {
		if got := get(sc, key); got != want {
			t.Errorf("container securityContext.%s = %v, want %v", key, got, want)
		}
	}
	if drop := get(sc, "capabilities", "drop", 0); drop != "ALL" {
		t.Errorf("container capabilities.drop = %v, want [ALL]", drop)
	}

	ready := get(c, "readinessProbe")
	if vs.tls {
		if get(ready, "httpGet", "path") != "/readyz" || get(ready, "httpGet", "scheme") != "HTTPS" {
			t.Errorf("readinessProbe over TLS = %v, want HTTPS GET /readyz (kubelet's gRPC probe has no TLS)", ready)
		}
	} else if get(ready, "grpc", "service") != "idempotency.v1.ClaimService" || get(ready, "grpc", "port") != 50051 {
		t.Errorf("readinessProbe = %v, want Kubernetes' gRPC probe of idempotency.v1.ClaimService on 50051", ready)
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

	args := get(c, "args").([]any)
	if args[0] != "serve" {
		t.Errorf("args[0] = %v, want serve", args[0])
	}
	for _, a := range args[1:] {
		name, _, _ := strings.Cut(strings.TrimLeft(a.(string), "-"), "=")
		if !flags[name] {
			t.Errorf("arg %q: claimd serve has no flag --%s", a, name)
		}
	}
	if vs.tls {
		for _, want := range []string{"--tls-cert=", "--tls-key=", "--tls-client-ca=", "--auth-file="} {
			if !slices.ContainsFunc(args, func(a any) bool { return strings.HasPrefix(a.(string), want) }) {
				t.Errorf("args %v lack %s…", args, want)
			}
		}
	}
}

func checkMigrateJob(t *testing.T, m manifest) {
	t.Helper()
	hook, _ := get(m, "metadata", "annotations", "helm.sh/hook").(string)
	if !strings.Contains(hook, "pre-install") || !strings.Contains(hook, "pre-upgrade") {
		t.Errorf("migrate Job hook = %q, want pre-install and pre-upgrade", hook)
	}
	c := get(m, "spec", "template", "spec", "containers", 0)
	if diff := cmp.Diff([]any{"migrate"}, get(c, "args")); diff != "" {
		t.Errorf("migrate Job args (-want +got):\n%s", diff)
	}
	if get(c, "securityContext", "readOnlyRootFilesystem") != true || get(c, "securityContext", "runAsNonRoot") != true {
		t.Error("migrate Job container is not non-root with a read-only root filesystem")
	}
}

// passwordURL matches a URL with user info that carries a password.
var passwordURL = regexp.MustCompile(`[a-z]+://[^/\s:@]*:[^/\s@]+@`)

// checkConfigMap: the only ConfigMap holds providers.yaml, a registry
// claimd loads, and nothing that looks like a credential.
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
	if _, err := horizon.Load("providers.yaml", []byte(text)); err != nil {
		t.Errorf("ConfigMap providers.yaml does not load: %v", err)
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
	if !bytes.Equal(want, got) {
		t.Fatalf("%s/files/alerts.yaml differs from prometheus/alerts.yaml: cp deploy/prometheus/alerts.yaml deploy/helm/claimd/files/", chart)
	}
}

// TestHelmRefusesWhatClaimdRefuses: value sets claimd would refuse at start
// fail at helm template, naming the value to set.
func TestHelmRefusesWhatClaimdRefuses(t *testing.T) {
	tests := []struct {
		desc string
		set  []string
		want string
	}{
		{"no PostgreSQL", []string{"postgres.existingSecret="}, "postgres.existingSecret is required"},
		{"no TLS, not insecure", []string{"tls.existingSecret="}, "tls.existingSecret is required"},
		{"TLS without client certificates", []string{"tls.clientCA=false"}, "tls.clientCA is required"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			args := []string{"template", "claimd", chart, "--kube-version", kubeVersion}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			_, err := helm(t, args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("helm template --set %v error = %v, want one containing %q", tc.set, err, tc.want)
			}
		})
	}
}

// serveFlags returns the flag names claimd serve defines, from its usage.
func serveFlags(t *testing.T) map[string]bool {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "claimd")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/claimd").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, _ := exec.Command(bin, "serve", "-h").CombinedOutput() // -h exits 2
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+--?([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if !flags["listen"] {
		t.Fatalf("claimd serve -h lists no --listen flag:\n%s", out)
	}
	return flags
}
