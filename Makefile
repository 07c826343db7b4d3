# floe — see README.md.
#
#   make build   build bin/floe from cmd/node
#   make run     build, then start one node with zero flags (data in ./floe-data)
#   make test    everything CI runs (installs versitygw for the S3 tests first)
#   make lint    go vet and a gofmt check
#   make bench   benchmark suite → docs/benchmarks.md (BENCH_SIZE=large for the big cases)
#   make cluster build, then run three nodes on loopback until Ctrl-C
#                (deploy/cluster.sh; data in ./floe-cluster)

GO ?= go
BIN := bin/floe

.PHONY: build run test lint cluster jepsen jepsen-ci bench

build:
	$(GO) build -o $(BIN) ./cmd/node

run: build
	./$(BIN)

# Three nodes on 127.0.0.1:8181/8281/8381 (HTTP) and :8182/8282/8382 (cluster);
# FLOE_CLUSTER_BASE_PORT moves them. See deploy/cluster.sh.
cluster: build
	FLOE_BIN=./$(BIN) bash deploy/cluster.sh

# Everything CI runs: the short jepsen-lite run first (a fixed seed, every
# fault kind), then the Go tests, so that go test's summary closes the log.
# FLOE_REQUIRE_S3=1 turns a missing versitygw into a failure instead of a skip.
test: jepsen-ci
	FLOE_REQUIRE_S3=1 $(GO) test -race -count=1 ./...

lint:
	$(GO) vet ./...
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi

# jepsen-lite: failure injection against real nodes (jepsen-lite/README.md).
# JEPSEN_FLAGS adds or overrides flags, e.g. JEPSEN_FLAGS='--seed 7 --duration 1h'.
JEPSEN_FLAGS ?=
jepsen: build
	bash .ci/install-versitygw.sh
	$(GO) run ./jepsen-lite --floe $(BIN) --nodes 5 --duration 10m $(JEPSEN_FLAGS)

# The short fixed-seed run CI does: every fault kind at least once.
jepsen-ci: build
	bash .ci/install-versitygw.sh
	$(GO) run ./jepsen-lite --floe $(BIN) --ci

# Benchmark suite: writes docs/benchmarks.md and docs/benchmarks-drop.png,
# every figure a ratio against a baseline measured in the same run.
# BENCH_SIZE=large: 500K-file purge, 100K tables, 1M idempotency records.
BENCH_SIZE ?= default

bench: build
	bash .ci/install-versitygw.sh
	$(GO) run ./internal/bench/cmd/floebench --suite --floe $(BIN) --size $(BENCH_SIZE) --out docs/benchmarks.md
