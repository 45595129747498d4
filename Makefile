# nogoo9 — `make help` lists the targets.
SHELL := /usr/bin/env bash -o pipefail
.DEFAULT_GOAL := help

BIN        := $(CURDIR)/bin
CLUSTER    := $(CURDIR)/.cluster
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS    := -s -w -X main.version=$(VERSION)
IMG        ?= nogoo9:$(VERSION)
GO         ?= go
# Control-plane binaries built from the Go module proxy by hack/tools (see docs/development.md).
TOOLS      := $(BIN)/etcd $(BIN)/kube-apiserver $(BIN)/kube-scheduler $(BIN)/kube-controller-manager $(BIN)/kwok
UNIT_PKGS  := $(shell $(GO) list ./... 2>/dev/null | grep -v /test/e2e)

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n\n"} /^[a-zA-Z_-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

##@ Build

.PHONY: build
build: ## Build bin/nogoo9: the static, trimmed binary the container image ships.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/nogoo9 .

.PHONY: tools
tools: $(TOOLS) ## Build etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok (first time: minutes).

$(TOOLS) &: hack/tools/go.mod hack/tools/go.sum hack/tools/etcd/main.go
	@hack/build-tools.sh $(BIN)

.PHONY: docker-build
docker-build: ## Build the container image (needs a Docker engine; none runs on the dev machine).
	docker build --build-arg VERSION=$(VERSION) -t $(IMG) .

##@ Quality

.PHONY: fmt
fmt: ## gofmt the tree.
	gofmt -w $$(git ls-files '*.go')

.PHONY: lint
lint: ## gofmt check and go vet.
	@bad=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$bad" ]; then echo "gofmt needed:"; echo "$$bad"; exit 1; fi
	$(GO) vet ./...
	cd hack/tools && $(GO) vet ./etcd

##@ Test

.PHONY: test
test: lint test-integration test-e2e ## Everything: lint, unit, integration (envtest) and end-to-end tests.

.PHONY: test-unit
test-unit: ## Unit tests of pure code (no cluster).
	$(GO) test -short -count=1 $(UNIT_PKGS)

.PHONY: test-integration
test-integration: tools ## Unit + integration tests (envtest: real etcd and kube-apiserver from bin/).
	KUBEBUILDER_ASSETS=$(BIN) $(GO) test -count=1 -p 1 -timeout 20m $(UNIT_PKGS)

.PHONY: test-e2e
test-e2e: tools build ## End-to-end tests: the real nogoo9 binary against the full local cluster with kwok.
	hack/install-chromium.sh
	NOGOO9_BIN=$(BIN)/nogoo9 NOGOO9_TOOLS=$(BIN) $(GO) test -count=1 -timeout 40m ./test/e2e/... -args -ginkgo.no-color

##@ Local cluster

.PHONY: cluster-up
cluster-up: tools ## Start etcd, kube-apiserver, scheduler, controller-manager and kwok on loopback (state in .cluster/).
	$(GO) run ./hack/cluster up --bin $(BIN) --dir $(CLUSTER)

.PHONY: cluster-down
cluster-down: ## Stop every process cluster-up started.
	$(GO) run ./hack/cluster down --dir $(CLUSTER)

##@ Run

.PHONY: run
run: build ## Run nogoo9 against the cluster from cluster-up.
	$(BIN)/nogoo9 --kubeconfig $(CLUSTER)/kubeconfig --namespace default --leader-elect=false

.PHONY: demo
demo: tools build ## Build, start a local cluster, apply samples, run nogoo9 and print how to reach it.
	hack/demo.sh

.PHONY: bench
bench: tools build ## Measure (ratios against baselines in the same run); writes bench/results.md.
	hack/bench.sh
