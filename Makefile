# floe — see README.md.
#
#   make build   build bin/floe from cmd/node and bin/floebench from bench/cmd/floebench
#   make run     build, then start one node with zero flags (data in ./floe-data)
#   make test    everything CI runs (installs versitygw for the S3 tests first)
#   make lint    go vet and a gofmt check
#   make spec    download the pinned Iceberg REST spec the spec tests use (checked by SHA-256)
#   make fuzz    every fuzz target for FUZZTIME (30s); make fuzz-ci: the short CI pass
#   make bench   benchmark suite → docs/benchmarks.md (BENCH_SIZE=large for the big cases);
#                without a go command it runs the prebuilt bin/floe and bin/floebench
#   make cluster build, then run three nodes on loopback until Ctrl-C
#                (deploy/cluster.sh; data in ./floe-cluster)

GO ?= go
BIN := bin/floe
FLOEBENCH := bin/floebench

.PHONY: build run test lint cluster jepsen jepsen-ci bench spec

build:
	$(GO) build -o $(BIN) ./cmd/node
	$(GO) build -o $(FLOEBENCH) ./bench/cmd/floebench

run: build
	./$(BIN)

# Three nodes on 127.0.0.1:8181/8281/8381 (HTTP) and :8182/8282/8382 (cluster);
# FLOE_CLUSTER_BASE_PORT moves them. See deploy/cluster.sh.
cluster: build
	FLOE_BIN=./$(BIN) bash deploy/cluster.sh

# The Iceberg REST spec the spec-validation tests check answers against,
# downloaded at its pinned revision and checked (internal/spectest finds it
# in $(FLOE_TOOLS)/spec/). Without it those tests skip with one line.
spec:
	bash .ci/fetch-spec.sh

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

# A sweep: one run per seed (5 nodes, every fault on the CI run's faster
# schedule, the mixed workload, which includes overlap), one line per seed,
# non-zero exit if any seed fails. SWEEP_SEEDS is a list or range of seeds,
# SWEEP_DURATION each seed's run.
SWEEP_SEEDS ?= 1001-1020
SWEEP_DURATION ?= 60s
.PHONY: jepsen-sweep
jepsen-sweep: build
	bash .ci/install-versitygw.sh
	$(GO) run ./jepsen-lite --floe $(BIN) --nodes 5 --nemesis all --workload mixed \
		--fault-gap-min 1s --fault-gap-max 2s --fault-max 4s \
		--duration $(SWEEP_DURATION) --seeds $(SWEEP_SEEDS) $(JEPSEN_FLAGS)

# Benchmark suite: writes docs/benchmarks.md and docs/benchmarks-drop.png,
# every figure a ratio against a baseline measured in the same run.
# BENCH_SIZE=large: 500K-file purge, 100K tables, 1M idempotency records.
#
# It runs the binaries bin/floebench and bin/floe. With a go command it
# rebuilds both first (make build). Without one (a benchmark machine with
# no Go toolchain) it runs them as they are: build them elsewhere with
# make build and copy bin/ over, with versitygw at $FLOE_VERSITYGW or
# ${FLOE_TOOLS:-$HOME/.cache/floe-tools}/versitygw, where
# .ci/install-versitygw.sh finds it without needing Go.
BENCH_SIZE ?= default

bench:
	@if command -v $(GO) >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory build; \
	elif [ -x $(BIN) ] && [ -x $(FLOEBENCH) ]; then \
		echo "bench: no $(GO) command; running the prebuilt $(FLOEBENCH) and $(BIN)"; \
	else \
		echo "bench: no $(GO) command and no prebuilt $(FLOEBENCH) and $(BIN); run make build where Go is installed and copy bin/ here" >&2; \
		exit 1; \
	fi
	bash .ci/install-versitygw.sh
	./$(FLOEBENCH) --suite --floe $(BIN) --size $(BENCH_SIZE) --out docs/benchmarks.md

# Fuzzing: each fuzz target for FUZZTIME. go test -fuzz takes one target per
# package run, so every target is its own go test invocation. A crasher is
# written to <package>/testdata/fuzz/<target>/. Minimization is off by
# default: a bounded run that ends while it minimizes can drop the crash.
# Plain go test (make test) runs every target's seed corpus as a test.
FUZZTIME ?= 30s
# Long enough that replaying a grown local corpus (the baseline coverage
# pass counts against -fuzztime) cannot take the whole budget.
FUZZTIME_CI ?= 10s
FUZZMINIMIZETIME ?= 0
FUZZ_TARGETS := \
	./fsm:FuzzDecode \
	./fsm:FuzzApply \
	./internal/storage:FuzzParseURI \
	./internal/storage:FuzzIsWithin \
	./catalog:FuzzParseIdentifier \
	./catalog:FuzzDecodeCommit \
	./catalog:FuzzRequestBody \
	./catalog:FuzzWithRequiredFields \
	./catalog:FuzzWithEmptyCollections \
	./transport:FuzzReadFrame \
	./idempotency:FuzzParseKey

# A target is ./pkg:Name, fuzzed for FUZZTIME, or ./pkg:Name:N, fuzzed for
# N executions. A duration can end in Go's own "context deadline exceeded"
# with no failing input (golang/go#75804, a race in the fuzzing coordinator
# at the deadline, likelier on a loaded machine; fixed in Go 1.27), so such
# a target is run once more; a failing input always fails the target. A
# count has no deadline to race: CI's targets use counts.
.PHONY: fuzz fuzz-ci
fuzz:
	@failed=; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; budget=$(FUZZTIME); \
		case $$rest in *:*) budget=$${rest#*:}x;; esac; \
		for try in 1 2; do \
			echo "--- fuzz $$name ($$pkg, $$budget)"; \
			out=$$($(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $$budget -fuzzminimizetime $(FUZZMINIMIZETIME) $$pkg 2>&1); rc=$$?; \
			echo "$$out"; \
			if [ $$rc -eq 0 ]; then break; fi; \
			if [ $$try -eq 2 ] || echo "$$out" | grep -q "Failing input written to"; then failed="$$failed $$name"; break; fi; \
			echo "--- fuzz $$name failed without a failing input; once more"; \
		done; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: failed:$$failed"; exit 1; fi

# The short pass CI runs: the targets whose packages build quickly with
# fuzzing instrumentation (which recompiles every dependency). The catalog
# and storage targets pull in iceberg-go, Arrow and the AWS SDK; CI runs
# their seed corpora as plain tests in make test, and make fuzz fuzzes them.
# Each runs about FUZZTIME_CI's worth of executions on a 2-core machine.
FUZZ_CI_TARGETS := \
	./fsm:FuzzDecode:100000 \
	./fsm:FuzzApply:100000 \
	./transport:FuzzReadFrame:60000 \
	./idempotency:FuzzParseKey:120000

fuzz-ci:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZTIME_CI) FUZZ_TARGETS="$(FUZZ_CI_TARGETS)"
