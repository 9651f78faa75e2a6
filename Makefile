# claimd — run `make help` for the targets.
#
# Tools are pinned here and installed with `go install` into a cache outside
# the checkout, so a clean clone builds them once per machine and never needs
# a remote buf plugin.

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
HELM_VERSION               := v3.22.0

IMAGE ?= claimd:dev

GO_TEST_FLAGS ?= -race -count=1 -timeout 30m
ARGS ?=
# VERSION is what `claimd version` prints (and the traces' service.version).
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)

# tool installs `go install`s a module at a version and leaves a stamp, so a
# version bump here reinstalls it.
define tool
$(TOOLS_DIR)/stamps/$(1)@$(3):
	@mkdir -p $(TOOLS_BIN) $(TOOLS_DIR)/stamps
	@echo "installing $(2)@$(3) into $(TOOLS_BIN)"
	cd /tmp && GOBIN=$(TOOLS_BIN) GOFLAGS= go install $(2)@$(3)
	@touch $$@
endef
$(eval $(call tool,buf,github.com/bufbuild/buf/cmd/buf,$(BUF_VERSION)))
$(eval $(call tool,protoc-gen-go,google.golang.org/protobuf/cmd/protoc-gen-go,$(PROTOC_GEN_GO_VERSION)))
$(eval $(call tool,protoc-gen-go-grpc,google.golang.org/grpc/cmd/protoc-gen-go-grpc,$(PROTOC_GEN_GO_GRPC_VERSION)))
$(eval $(call tool,grpcurl,github.com/fullstorydev/grpcurl/cmd/grpcurl,$(GRPCURL_VERSION)))
$(eval $(call tool,ghz,github.com/bojand/ghz/cmd/ghz,$(GHZ_VERSION)))
# helm builds from source with most of Kubernetes' client libraries: several
# minutes on two cores, once per machine.
$(eval $(call tool,helm,helm.sh/helm/v3/cmd/helm,$(HELM_VERSION)))

BUF       := $(TOOLS_DIR)/stamps/buf@$(BUF_VERSION)
GEN_TOOLS := $(BUF) $(TOOLS_DIR)/stamps/protoc-gen-go@$(PROTOC_GEN_GO_VERSION) $(TOOLS_DIR)/stamps/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
GRPCURL   := $(TOOLS_DIR)/stamps/grpcurl@$(GRPCURL_VERSION)
GHZ       := $(TOOLS_DIR)/stamps/ghz@$(GHZ_VERSION)
HELM      := $(TOOLS_DIR)/stamps/helm@$(HELM_VERSION)

# path_hint tells how to run the installed tools by name.
path_hint = echo "installed in $(TOOLS_BIN); to run by name: export PATH=\"$(TOOLS_BIN):\$$PATH\""

.PHONY: help build run test generate checkgenerate lint tools buf protoc-gen-go protoc-gen-go-grpc grpcurl ghz helm-tool bench chaos image helm clean

help: ## show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-19s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build bin/claimd, its version from git describe (VERSION=... to set it)
	go build -ldflags "-X main.version=$(VERSION)" -o bin/claimd ./cmd/claimd

run: build ## start claimd with embedded tiers on 127.0.0.1:50051 (ARGS="--flag ..." to add flags)
	./bin/claimd serve $(ARGS)

test: $(HELM) ## every test: Go with -race (real Redis, Redis Cluster, Sentinel and PostgreSQL, installed when missing; helm lint/template of the chart), each benchmark once, the Python and TypeScript clients
	./scripts/test-deps.sh
	go test $(GO_TEST_FLAGS) ./...
	@echo "== each Go benchmark once, so none can rot"
	go test -run '^$$' -bench . -benchtime 1x -timeout 15m ./...
	@echo "== Python client and example"
	./clients/python/test.sh
	@echo "== TypeScript client and Node example"
	./clients/typescript/test.sh

generate: $(GEN_TOOLS) ## regenerate gen/ from proto/ with local plugins
	rm -rf gen
	buf generate

checkgenerate: generate ## fail if gen/ differs from what make generate produces
	@git diff --exit-code -- gen || { echo "gen/ is stale: run make generate and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- gen)" || { git status --porcelain -- gen; echo "gen/ has untracked files"; exit 1; }

lint: $(BUF) ## buf lint + buf format + go vet + gofmt
	buf lint
	buf format --diff --exit-code
	go vet ./...
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [[ -n "$$out" ]]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

bench: $(GHZ) ## load scenarios (ghz and cmd/claimload) against claimd and its baselines in one run -> BENCHMARKS.md; BENCH_DURATION=2s for a smoke run
	./scripts/bench.sh

chaos: ## fault injection (Redis flush/kill, PostgreSQL immediate stop, replica kill -9, lost replies, crash points) with history checks -> RELIABILITY.md; exits 1 on a violation; CHAOS_DURATION=5s for the short form
	./scripts/chaos.sh

tools: $(GEN_TOOLS) $(GRPCURL) $(GHZ) $(HELM) ## install every pinned tool (buf, protoc plugins, grpcurl, ghz, helm); or one: make grpcurl
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

helm-tool: $(HELM) ## install the pinned helm only (a few minutes: it builds from source)
	@$(path_hint)

image: ## build the container image $(IMAGE) (docker when its daemon answers, else buildah)
	@if command -v docker >/dev/null && docker info >/dev/null 2>&1; then \
		docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) . ; \
	elif command -v buildah >/dev/null; then \
		buildah build --build-arg VERSION=$(VERSION) -t $(IMAGE) . ; \
	else \
		echo "make image: needs docker (with a running daemon) or buildah (apt-get install buildah)" >&2; exit 1; \
	fi

helm: $(HELM) ## helm lint and helm template of deploy/helm/claimd with each value set, and the checks of the rendered manifests
	go test -count=1 ./deploy/

clean: ## remove build outputs
	rm -rf bin
