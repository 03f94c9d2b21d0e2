# Ferry's build. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO          ?= go
TOOLS       := $(CURDIR)/.tools
BUF         := $(TOOLS)/buf
GOGOFASTER  := $(TOOLS)/protoc-gen-gogofaster
GOLANGCI    := $(TOOLS)/golangci-lint

# Pinned tool versions; `make tools` installs them into .tools/.
BUF_VERSION      := v1.75.0
GOGO_VERSION     := v1.3.2
GOLANGCI_VERSION := v2.15.0
# A second real remote-write receiver for make test-victoriametrics.
VICTORIAMETRICS_VERSION := v1.151.0

# Short fuzz runs in `make test`; raise for a real fuzzing session. A count
# of executions, not a duration: with a duration, Go 1.26's fuzz coordinator
# can fail a target with a bare "context deadline exceeded" when the time
# runs out while a worker is busy on a loaded machine (golang/go#75804,
# fixed in Go 1.27); a count has no deadline to race.
FUZZTIME ?= 50000x

# What -version and ferry_build_info report (prometheus/common/version).
# The Dockerfile takes the same values as build arguments.
VERSION_PKG := github.com/prometheus/common/version
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
REVISION    ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BRANCH      ?= $(shell git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)
BUILD_DATE  ?= $(shell date -u +%Y%m%d-%H:%M:%S)
LDFLAGS     := -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Revision=$(REVISION) \
               -X $(VERSION_PKG).Branch=$(BRANCH) -X $(VERSION_PKG).BuildDate=$(BUILD_DATE) \
               -X $(VERSION_PKG).BuildUser=$(shell id -un 2>/dev/null || echo unknown)

include deploy/kafka-local/kafka.mk

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | sort | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-16s %s\n", $$1, $$2}'

.PHONY: build
build: ## Build bin/ferry-consumer, bin/ferry-pusher, bin/ferry-gateway, bin/ferry-loadgen and bin/ferry-dev
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/ ./services/...

.PHONY: ldflags
ldflags: ## Print the -ldflags with which `make build` stamps the version (the test of -version builds with them)
	@echo "$(LDFLAGS)"

.PHONY: run
run: ## Run the whole pipeline in one process: in-process Kafka, pusher, consumers, demo load
	@# Built, then run directly: `go run` exits 1 on Ctrl-C even when the
	@# program stopped cleanly with status 0.
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/ferry-dev ./services/ferry-dev
	bin/ferry-dev $(ARGS)

.PHONY: screenshots
screenshots: ## Screenshots of the pusher's and a consumer's status page into docs/img/ (runs ferry-dev briefly; needs Debian's chromium)
	bash scripts/screenshots.sh docs/img

.PHONY: test
test: ## Vet, then run every test with the race detector (real Kafka when Java and Maven exist), then short fuzz runs
	$(GO) vet ./...
	@# -v so each package's "kafkatest: using ..." line shows; the filter drops the per-test chatter.
	set -o pipefail; $(GO) test -race -count=1 -timeout 30m -v ./... 2>&1 | grep -vE '^(=== (RUN|PAUSE|CONT|NAME)|[[:space:]]*--- PASS|PASS$$)'
	@# The TSDB backend's tests once more with every tenant in one shared TSDB (-storage.tenancy=shared).
	FERRY_TEST_TENANCY=shared $(GO) test -race -count=1 -timeout 10m ./pusher/tsdbstore/
	$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZTIME)

.PHONY: test-rw2
test-rw2: $(TOOLS)/prometheus3 ## The remote write 2.0 test with a real Prometheus 3 (built from the Go module proxy; slow the first time)
	FERRY_PROMETHEUS3=$(TOOLS)/prometheus3 $(GO) test -count=1 -run TestAPrometheus3WritesRemoteWrite2ThroughTheGateway -v ./integration/

# Debian packages Prometheus 2 only; the Prometheus 3 of the module Ferry
# already depends on speaks remote write 2.0.
$(TOOLS)/prometheus3:
	mkdir -p $(TOOLS)/prometheus3.build
	GOBIN=$(TOOLS)/prometheus3.build $(GO) install github.com/prometheus/prometheus/cmd/prometheus@$$($(GO) list -m -f '{{.Version}}' github.com/prometheus/prometheus)
	mv $(TOOLS)/prometheus3.build/prometheus $@ && rmdir $(TOOLS)/prometheus3.build

.PHONY: test-victoriametrics
test-victoriametrics: $(TOOLS)/victoria-metrics ## The remote-write backend against a second real receiver, a VictoriaMetrics single node (built from the Go module proxy; slow the first time)
	FERRY_VICTORIAMETRICS=$(TOOLS)/victoria-metrics $(GO) test -count=1 -run TestRemoteWriteToVictoriaMetrics -v ./integration/

$(TOOLS)/victoria-metrics:
	mkdir -p $(TOOLS)/victoria-metrics.build
	GOBIN=$(TOOLS)/victoria-metrics.build $(GO) install github.com/VictoriaMetrics/VictoriaMetrics/app/victoria-metrics@$(VICTORIAMETRICS_VERSION)
	mv $(TOOLS)/victoria-metrics.build/victoria-metrics $@ && rmdir $(TOOLS)/victoria-metrics.build

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 50000x: executions; a duration such as 5m works too)
	@bash scripts/fuzz.sh $(FUZZTIME)

.PHONY: chaos
chaos: ## Fault tests at scale: SIGKILLed consumers and pusher, server errors, a broker restart, broker loss on a three-broker cluster (real Kafka); prints a summary line
	set -o pipefail; FERRY_CHAOS=large $(GO) test -count=1 -v -timeout 60m -run . ./chaos/ 2>&1 | grep -E '^(chaos:|--- |ok|FAIL|panic)|_test.go:'

.PHONY: bench
bench: ## End-to-end benchmark on a real Kafka with consumer and pusher processes; rewrites docs/benchmarks.md (ARGS="-h" lists its flags)
	$(GO) run ./bench $(ARGS)

.PHONY: bench-micro
bench-micro: ## Go micro-benchmarks of the hot paths, for benchstat (COUNT=6 by default)
	FERRY_KAFKA_FAKE=1 CI= $(GO) test -run '^$$' -bench . -benchmem -count $(or $(COUNT),6) ./proto/codec ./proto/wire ./consumer ./pusher ./pusher/tsdbstore

.PHONY: tools
tools: $(BUF) $(GOGOFASTER) ## Install pinned code-generation tools into .tools/

$(BUF):
	GOBIN=$(TOOLS) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)

$(GOGOFASTER):
	GOBIN=$(TOOLS) $(GO) install github.com/gogo/protobuf/protoc-gen-gogofaster@$(GOGO_VERSION)

$(GOLANGCI):
	GOBIN=$(TOOLS) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)

.PHONY: generate
generate: tools ## Regenerate the gogo code and the embedded descriptor set from proto/
	$(BUF) generate --exclude-path proto/gogoproto
	$(BUF) build --exclude-source-info -o proto/ferry/v1/descriptors.binpb

.PHONY: check-generate
check-generate: generate ## Fail when the committed generated code is stale
	@git diff --exit-code -- proto/ || { echo "generated code is stale: run 'make generate' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- proto/)" || { git status --porcelain -- proto/; echo "untracked generated files: run 'make generate' and commit"; exit 1; }

.PHONY: docs
docs: ## Regenerate docs/configuration.md from the commands' flags, docs/design.md's import table from go list and its path counts from its list
	$(GO) test -count=1 ./docs -update

.PHONY: lint
lint: tools $(GOLANGCI) ## go vet, golangci-lint, buf lint and buf format
	$(GO) vet ./...
	$(GOLANGCI) run ./...
	$(BUF) lint
	$(BUF) format -d --exit-code --exclude-path proto/gogoproto

.PHONY: clean
clean: ## Remove build output
	rm -rf bin/
