# floe — see README.md.
#
#   make build   build bin/floe from cmd/node
#   make run     build, then start one node with zero flags (data in ./floe-data)
#   make test    everything CI runs (installs versitygw for the S3 tests first)
#   make lint    go vet and a gofmt check
#   make cluster build, then run three nodes on loopback until Ctrl-C
#                (deploy/cluster.sh; data in ./floe-cluster)

GO ?= go
BIN := bin/floe

.PHONY: build run test lint cluster

build:
	$(GO) build -o $(BIN) ./cmd/node

run: build
	./$(BIN)

# Three nodes on 127.0.0.1:8181/8281/8381 (HTTP) and :8182/8282/8382 (cluster);
# FLOE_CLUSTER_BASE_PORT moves them. See deploy/cluster.sh.
cluster: build
	FLOE_BIN=./$(BIN) bash deploy/cluster.sh

# FLOE_REQUIRE_S3=1 turns a missing versitygw into a failure instead of a skip.
test:
	bash .ci/install-versitygw.sh
	FLOE_REQUIRE_S3=1 $(GO) test -race -count=1 ./...

lint:
	$(GO) vet ./...
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
