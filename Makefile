# deskgrid — see README.md.
SHELL := /bin/bash
MODULES := proto services/platform services/session services/display services/sandbox services/agent services/history gateway cmd/deskgrid sdk examples
BIN := $(CURDIR)/.bin
GO_TEST_FLAGS ?= -race -count=1 -timeout 30m

.PHONY: all build build-node setup generate lint test ci bench tasks tidy clean

all: build

build:
	go build -o bin/deskgrid ./cmd/deskgrid

# The node image's binary: display, sandbox and the client commands, no LLM
# or cloud SDK (cmd/deskgrid/nodeonly.go).
build-node:
	go build -tags nodeonly -o bin/deskgrid-node ./cmd/deskgrid

setup:
	scripts/setup --dev

# Regenerates Go code, gateway handlers and the OpenAPI document from proto/,
# and the TypeScript SDK's types from the document the gateway serves.
generate:
	PATH="$(BIN):$$PATH" $(BIN)/buf generate
	@mkdir -p .cache && (cd gateway && go run ./internal/openapi/dump) > .cache/openapi.json
	cd sdk/typescript && node scripts/generate.mjs ../../.cache/openapi.json

# gofmt, go vet and staticcheck (staticcheck.conf; installed by scripts/setup
# --dev) on every module and on the node image's build (-tags nodeonly), every
# go.mod tidy and all of them on one version of each dependency
# (scripts/check-modules.go), buf lint, the OpenAPI document the gateway
# serves linted by Redocly (zero errors; installed by scripts/setup --dev),
# proof that the generated code is fresh, and the alerting rules checked and
# unit-tested by promtool (Debian's prometheus, installed by scripts/setup --dev).
lint: generate
	@out=$$(gofmt -l $(MODULES) scripts); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@for m in $(MODULES); do (cd $$m && go vet ./...) || exit 1; done
	cd cmd/deskgrid && go vet -tags nodeonly ./...
	@for m in $(MODULES); do (cd $$m && GOWORK=off go mod tidy -diff) || { echo "$$m: go.mod is not tidy (make tidy)"; exit 1; }; done
	GOWORK=off go run scripts/check-modules.go
	@for m in $(MODULES); do echo "staticcheck $$m"; (cd $$m && $(BIN)/staticcheck ./...) || exit 1; done
	cd cmd/deskgrid && $(BIN)/staticcheck -tags nodeonly ./...
	$(BIN)/buf lint
	REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true gateway/e2e/node_modules/.bin/redocly lint --format stylish .cache/openapi.json
	git diff --exit-code -- proto gateway/internal/openapi sdk/typescript/src/openapi.ts
	promtool check rules deploy/observability/rules.yml
	promtool test rules deploy/observability/rules_test.yml

test: build
	@set -o pipefail; for m in $(MODULES); do echo "== $$m"; (cd $$m && go test $(GO_TEST_FLAGS) ./...) || exit 1; done
	@echo "== sdk/python"; cd sdk/python && DESKGRID_BIN=$(CURDIR)/bin/deskgrid python3 -m unittest discover -s tests
	@echo "== sdk/typescript"; cd sdk/typescript && DESKGRID_BIN=$(CURDIR)/bin/deskgrid npm test --silent

# What CI runs: setup on a fresh machine, lint, the full test suite.
ci: setup lint test

# Measures the figures in docs/benchmarks.md and rewrites it.
bench: build
	scripts/bench

# The task suite with every task carried out through every provider's wire
# format; prints the share of tasks done per provider.
tasks: build
	@mkdir -p .cache
	cd cmd/deskgrid && DESKGRID_BIN=$(CURDIR)/bin/deskgrid DESKGRID_TASKS_ALL=1 DESKGRID_TASKS_REPORT=$(CURDIR)/.cache/tasks.md \
		go test -count=1 -timeout 30m -run '^TestTaskSuite$$' . ; cat $(CURDIR)/.cache/tasks.md

tidy:
	@for m in $(MODULES); do (cd $$m && GOWORK=off go mod tidy) || exit 1; done

clean:
	rm -rf bin
