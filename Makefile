# claimd — run `make help` for the targets.
#
# Tools are pinned here and installed into a cache outside the checkout (with
# `go install`; buf as Buf's release binary from the npm registry), so a clean
# clone installs them once per machine and never needs a remote buf plugin.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

TOOLS_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/claimd-tools
TOOLS_BIN := $(TOOLS_DIR)/bin
export PATH := $(TOOLS_BIN):$(PATH)

BUF_VERSION                := v1.75.0
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.0
GRPCURL_VERSION            := v1.9.4
GHZ_VERSION                := v0.120.0
HELM_VERSION               := v3.21.4
STATICCHECK_VERSION        := v0.8.2

IMAGE ?= claimd:dev

# -p 4: go test runs at most -p test binaries at once (GOMAXPROCS, 2 on a
# two-core machine, by default), and most of them wait on leases and servers
# they start: four at once took internal/... from 211 s to 155 s with the
# same CPU. -vet=off: go vet runs in make lint (every module, every analyzer,
# as CI does); go test's own vet pass repeated a subset of it over every
# dependency, sqlite's too, about 35 s of CPU of a make test that is
# CPU-bound on two cores.
GO_TEST_FLAGS ?= -race -count=1 -timeout 30m -p 4 -vet=off
# GO_TEST_ARGS go to every test binary (after go test's -args): each
# benchmark once, so none can rot, in the same test binaries as the tests
# (under -race, after them; a separate non-race pass linked every test binary
# a second time for a few seconds of benchmarks). Not go test's own -bench:
# with it, go test runs the packages' test binaries one at a time, the first
# after every build ends (benchmarks are timed alone), which made the Go
# pass's ~460 s of mostly waiting tests serial, the cores mostly idle.
GO_TEST_ARGS := -test.bench=. -test.benchtime=1x
ARGS ?=
# CLIENT_MODULE is the Go client, a module of its own: ./... at the root does
# not descend into it, so the Go targets name it.
CLIENT_MODULE := clients/go
# DEPLOY_MODULE holds the chart's test, a module of its own so that helm's
# packages (it runs helm lint and helm template in process) and the
# Kubernetes libraries they need stay out of the server's go.mod.
DEPLOY_MODULE := deploy
# API_MODULE is the generated Go API of proto/ (gen/), a module of its own as
# etcd's api/v3: the server and the client each require it and neither
# requires the other. make generate writes its code and keeps its go.mod.
API_MODULE := gen
# RELEASE_REF is the last release, whose API buf breaking guards: the tag
# v0.1.0 once the repository has it, until then the commit 0.1.0 was cut
# from (the last of 2026-11-30's first session, before the lease secret).
RELEASE_REF ?= $(shell git rev-parse -q --verify 'refs/tags/v0.1.0^{commit}' || echo bbfbc472e4ce84fb6322820fb8624a4a61011d08)
# VERSION is what `claimd version` prints (and the traces' service.version):
# the semver that scripts/version.sh derives from git, the one make dist
# stamps on every artifact (docs/development.md, "Versions").
VERSION ?= $(shell ./scripts/version.sh semver 2>/dev/null || echo dev)

# tool installs `go install`s a module at a version and leaves a stamp, so a
# version bump here reinstalls it. Static and -trimpath, the compile flags
# of every non-race Go build in make test (claimd and the test tools, which
# scripts/test.sh builds first, the tests' own builds, make helm): on a
# fresh machine make test installs grpcurl first, and the standard library
# and the packages it shares with claimd are then compiled once for all of
# them (with go's defaults, a second time: grpcurl and the claimd build
# took ~75 CPU-s more from an empty build cache).
define tool
$(TOOLS_DIR)/stamps/$(1)@$(3):
	@mkdir -p $(TOOLS_BIN) $(TOOLS_DIR)/stamps
	@echo "installing $(2)@$(3) into $(TOOLS_BIN)"
	cd /tmp && CGO_ENABLED=0 GOBIN=$(TOOLS_BIN) GOFLAGS=-trimpath go install $(2)@$(3)
	@touch $$@
endef
# buf is Buf's release binary from the npm registry, or built from source
# where that is not available (scripts/install-buf.sh says why).
$(TOOLS_DIR)/stamps/buf@$(BUF_VERSION):
	@mkdir -p $(TOOLS_BIN) $(TOOLS_DIR)/stamps
	./scripts/install-buf.sh $(BUF_VERSION) $(TOOLS_BIN)
	@touch $@
$(eval $(call tool,protoc-gen-go,google.golang.org/protobuf/cmd/protoc-gen-go,$(PROTOC_GEN_GO_VERSION)))
$(eval $(call tool,protoc-gen-go-grpc,google.golang.org/grpc/cmd/protoc-gen-go-grpc,$(PROTOC_GEN_GO_GRPC_VERSION)))
$(eval $(call tool,grpcurl,github.com/fullstorydev/grpcurl/cmd/grpcurl,$(GRPCURL_VERSION)))
$(eval $(call tool,ghz,github.com/bojand/ghz/cmd/ghz,$(GHZ_VERSION)))
# helm builds from source with most of Kubernetes' client libraries: several
# minutes on two cores, once per machine. No target needs it (the chart's
# test links helm's packages instead, at the version of deploy/go.mod, which
# HELM_VERSION follows); make helm-tool installs it for you.
$(eval $(call tool,helm,helm.sh/helm/v3/cmd/helm,$(HELM_VERSION)))
$(eval $(call tool,staticcheck,honnef.co/go/tools/cmd/staticcheck,$(STATICCHECK_VERSION)))

BUF       := $(TOOLS_DIR)/stamps/buf@$(BUF_VERSION)
GEN_TOOLS := $(BUF) $(TOOLS_DIR)/stamps/protoc-gen-go@$(PROTOC_GEN_GO_VERSION) $(TOOLS_DIR)/stamps/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
GRPCURL   := $(TOOLS_DIR)/stamps/grpcurl@$(GRPCURL_VERSION)
GHZ       := $(TOOLS_DIR)/stamps/ghz@$(GHZ_VERSION)
HELM      := $(TOOLS_DIR)/stamps/helm@$(HELM_VERSION)
STATICCHECK := $(TOOLS_DIR)/stamps/staticcheck@$(STATICCHECK_VERSION)

# path_hint tells how to run the installed tools by name.
path_hint = echo "installed in $(TOOLS_BIN); to run by name: export PATH=\"$(TOOLS_BIN):\$$PATH\""

.PHONY: help build run test dist dist-test generate checkgenerate lint tools buf protoc-gen-go protoc-gen-go-grpc grpcurl ghz helm-tool staticcheck bench chaos image helm clean

help: ## show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-19s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build bin/claimd, its version from git (scripts/version.sh; VERSION=... to set it)
	go build -ldflags "-X main.version=$(VERSION)" -o bin/claimd ./cmd/claimd

run: build ## start claimd with embedded tiers on 127.0.0.1:50051 (ARGS="--flag ..." to add flags)
	./bin/claimd serve $(ARGS)

test: ## every test: Go with -race and each benchmark once (real Redis, Redis Cluster, Sentinel and PostgreSQL, installed when missing) and, beside it, the chart (helm lint/template in process) and the Python, TypeScript and Java clients (scripts/test.sh)
	./scripts/test-deps.sh
	GO_TEST_FLAGS="$(GO_TEST_FLAGS)" GO_TEST_ARGS="$(GO_TEST_ARGS)" ./scripts/test.sh

dist: ## dist/: claimd, the Python wheel and sdist, the npm tarball and a Maven repository with the Java client, all of one version from git (scripts/version.sh)
	./scripts/dist.sh

dist-test: ## make dist, then install each artifact as its README says into a fresh project outside the repository and use it against dist/claimd (not in make test: about 1.5 minutes of CPU when warm; .ci/run runs it)
	./scripts/dist-test.sh

# GENERATED are the generated files of every language, all from proto/.
GENERATED := gen clients/python/src/claimd/_gen clients/typescript/src/gen clients/java/src/generated/java

generate: $(GEN_TOOLS) ## regenerate the code of proto/ in every language with local, pinned plugins: Go (gen/), Python (grpcio-tools, in the client's venv), TypeScript (protoc-gen-es, from npm) and Java (protoc's own generator, from Maven)
	find $(API_MODULE) -mindepth 1 -maxdepth 1 ! -name go.mod ! -name go.sum -exec rm -rf {} +
	buf generate
	./clients/python/generate.sh
	./clients/typescript/generate.sh
	./clients/java/generate.sh

checkgenerate: generate ## fail if any generated code differs from what make generate produces
	@git diff --exit-code -- $(GENERATED) || { echo "generated code is stale: run make generate and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- $(GENERATED))" || { git status --porcelain -- $(GENERATED); echo "generated code has untracked files"; exit 1; }

lint: $(BUF) $(STATICCHECK) ## buf lint, buf format, buf breaking against the last release; go vet, staticcheck and gofmt of every Go module; shellcheck
	./scripts/lint-deps.sh
	buf lint
	buf format --diff --exit-code
	buf breaking proto --against '.git#ref=$(RELEASE_REF),subdir=proto'
	go vet ./...
	cd $(CLIENT_MODULE) && go vet ./...
	cd $(DEPLOY_MODULE) && go vet ./...
	cd $(API_MODULE) && go vet ./...
	staticcheck ./...
	cd $(CLIENT_MODULE) && staticcheck ./...
	cd $(DEPLOY_MODULE) && staticcheck ./...
	cd $(API_MODULE) && staticcheck ./...
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [[ -n "$$out" ]]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	shellcheck $$(git ls-files '*.sh') .ci/run

bench: $(GHZ) ## load scenarios (ghz and cmd/claimload) against claimd and its baselines in one run -> BENCHMARKS.md; BENCH_DURATION=2s for a smoke run
	./scripts/bench.sh

chaos: ## fault injection (Redis flush/kill, PostgreSQL immediate stop, replica kill -9, lost replies, crash points) with history checks -> RELIABILITY.md; exits 1 on a violation; CHAOS_DURATION=5s for the short form
	./scripts/chaos.sh

tools: $(GEN_TOOLS) $(GRPCURL) $(GHZ) $(STATICCHECK) ## install every pinned tool the targets use (buf, protoc plugins, grpcurl, ghz, staticcheck); or one: make grpcurl
	@$(path_hint)

buf: $(BUF) ## install the pinned buf only
	@$(path_hint)

protoc-gen-go: $(TOOLS_DIR)/stamps/protoc-gen-go@$(PROTOC_GEN_GO_VERSION) ## install the pinned protoc-gen-go only
	@$(path_hint)

protoc-gen-go-grpc: $(TOOLS_DIR)/stamps/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION) ## install the pinned protoc-gen-go-grpc only
	@$(path_hint)

grpcurl: $(GRPCURL) ## install the pinned grpcurl only
	@$(path_hint)

ghz: $(GHZ) ## install the pinned ghz only
	@$(path_hint)

helm-tool: $(HELM) ## install the pinned helm CLI, which no target needs (several minutes: it builds from source)
	@$(path_hint)

staticcheck: $(STATICCHECK) ## install the pinned staticcheck only
	@$(path_hint)

image: ## build the container image $(IMAGE) (docker when its daemon answers, else buildah)
	@if command -v docker >/dev/null && docker info >/dev/null 2>&1; then \
		docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) . ; \
	elif command -v buildah >/dev/null; then \
		buildah build --build-arg VERSION=$(VERSION) -t $(IMAGE) . ; \
	else \
		echo "make image: needs docker (with a running daemon) or buildah (apt-get install buildah)" >&2; exit 1; \
	fi

# -vet=off as in make test: make lint vets the deploy module, and go test's
# vet pass over helm's and Kubernetes' packages was ~50 CPU-s of a cold run.
# Static and -trimpath as the other non-race builds of make test (see tool
# above): the standard library and the packages shared with claimd are
# compiled once for all of them.
helm: ## helm lint --strict and helm template of deploy/helm/claimd (helm's Go packages, no helm binary) with each value set, and the checks of the rendered manifests
	cd $(DEPLOY_MODULE) && CGO_ENABLED=0 go test -trimpath -count=1 -vet=off -timeout 15m ./...

clean: ## remove build outputs
	rm -rf bin dist
