package deploy_test

// helm lint and helm template, in process: the same packages the helm CLI
// calls (pkg/lint, pkg/chartutil, pkg/engine, pkg/releaseutil), in the same
// order, so that no helm binary has to be built for make test. Each function
// names the CLI code it follows (helm v3.21.4, the version of deploy/go.mod
// and of the Makefile's HELM_VERSION); what the CLI does and these do not is
// said where it matters.

import (
	"fmt"
	"os"
	"path"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/strvals"
	"sigs.k8s.io/yaml"
)

const (
	// releaseName and namespace are what `helm template claimd CHART` uses
	// (the namespace is helm's default without a kube context).
	releaseName = "claimd"
	namespace   = "default"
)

// helmArgs are the command-line arguments of helm template and helm lint
// that the tests use.
type helmArgs struct {
	valueFiles []string // -f, in order
	set        []string // --set, in order, after the files
	// kubeVersion is --kube-version; empty leaves helm's default
	// capabilities (Kubernetes 1.20 without the release build's ldflags).
	kubeVersion string
	// apiVersions replaces the API versions of the capabilities: what
	// `helm install` learns from a cluster's discovery (helm template's
	// --api-versions can only add to the defaults).
	apiVersions chartutil.VersionSet
}

// values merges the value files and --set flags as
// pkg/cli/values.Options.MergeValues does (local files only).
func (a helmArgs) values() (map[string]any, error) {
	base := map[string]any{}
	for _, f := range a.valueFiles {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		cur := map[string]any{}
		if err := yaml.Unmarshal(raw, &cur); err != nil {
			return nil, fmt.Errorf("failed to parse %s: %w", f, err)
		}
		base = mergeMaps(base, cur)
	}
	for _, s := range a.set {
		if err := strvals.ParseInto(s, base); err != nil {
			return nil, fmt.Errorf("failed parsing --set data: %w", err)
		}
	}
	return base, nil
}

// mergeMaps is pkg/cli/values' mergeMaps: b's keys win, maps merge deeply.
func mergeMaps(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if v, ok := v.(map[string]any); ok {
			if bv, ok := out[k].(map[string]any); ok {
				out[k] = mergeMaps(bv, v)
				continue
			}
		}
		out[k] = v
	}
	return out
}

func (a helmArgs) kube() (*chartutil.KubeVersion, error) {
	if a.kubeVersion == "" {
		return nil, nil
	}
	kv, err := chartutil.ParseKubeVersion(a.kubeVersion)
	if err != nil {
		return nil, fmt.Errorf("invalid kube version %q: %w", a.kubeVersion, err)
	}
	return kv, nil
}

// helmTemplate returns what `helm template claimd CHART ARGS` prints: the
// manifests in install order, then the hooks (test hooks included), each
// after its "# Source:" line. It follows action.Install.RunWithContext in
// client-only mode and Configuration.renderResources.
func helmTemplate(chartDir string, a helmArgs) (string, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return "", err
	}
	vals, err := a.values()
	if err != nil {
		return "", err
	}
	if err := chartutil.ProcessDependenciesWithMerge(ch, vals); err != nil {
		return "", err
	}
	caps := chartutil.DefaultCapabilities.Copy()
	kv, err := a.kube()
	if err != nil {
		return "", err
	}
	if kv != nil {
		caps.KubeVersion = *kv
	}
	if a.apiVersions != nil {
		caps.APIVersions = a.apiVersions
	}
	if c := ch.Metadata.KubeVersion; c != "" && !chartutil.IsCompatibleRange(c, caps.KubeVersion.String()) {
		return "", fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s", c, caps.KubeVersion.String())
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{
		Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true,
	}, caps)
	if err != nil {
		return "", err
	}
	var e engine.Engine
	files, err := e.Render(ch, rv)
	if err != nil {
		return "", err
	}
	// NOTES.txt renders (so its errors count) but is no manifest.
	for name := range files {
		if path.Base(name) == "NOTES.txt" {
			delete(files, name)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, m := range manifests {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.Name, m.Content)
	}
	out := strings.TrimSpace(b.String()) + "\n"
	b.Reset()
	for _, h := range hooks {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", h.Path, h.Manifest)
	}
	return out + b.String(), nil
}

// helmLint returns the findings that fail `helm lint --strict CHART ARGS`:
// warnings and errors (action.Lint.Run with Strict).
func helmLint(chartDir string, a helmArgs) ([]support.Message, error) {
	vals, err := a.values()
	if err != nil {
		return nil, err
	}
	kv, err := a.kube()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(path.Join(chartDir, "Chart.yaml")); err != nil {
		return nil, fmt.Errorf("unable to check Chart.yaml file in chart: %w", err)
	}
	linter := lint.AllWithKubeVersionAndSchemaValidation(chartDir, vals, namespace, kv, false)
	var failed []support.Message
	for _, m := range linter.Messages {
		if m.Severity >= support.WarningSev {
			failed = append(failed, m)
		}
	}
	return failed, nil
}
