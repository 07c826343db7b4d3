# floe — see README.md.
#
#   make build   build bin/floe from cmd/node
#   make run     build, then start one node with zero flags (data in ./floe-data)
#   make test    everything CI runs (installs versitygw for the S3 tests first)
#   make lint    go vet and a gofmt check

GO ?= go
BIN := bin/floe

.PHONY: build run test lint

build:
	$(GO) build -o $(BIN) ./cmd/node

run: build
	./$(BIN)

# FLOE_REQUIRE_S3=1 turns a missing versitygw into a failure instead of a skip.
test:
	bash .ci/install-versitygw.sh
	FLOE_REQUIRE_S3=1 $(GO) test -race -count=1 ./...

lint:
	$(GO) vet ./...
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
