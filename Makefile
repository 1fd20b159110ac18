# skiplock — the two commands a newcomer needs: `make demo` and `make test`.
GO ?= go
export PATH := /usr/local/go/bin:$(PATH)

.PHONY: demo test deps vet lint bench chaos soak build

## demo needs only the PostgreSQL server binaries, not the test suite's brokers and browser.
demo:
	@SKIPLOCK_DEPS=postgres bash scripts/deps.sh
	$(GO) run ./cmd/skiplock demo

build:
	$(GO) build ./...

## deps installs what is missing on a fresh Debian machine: PostgreSQL server binaries,
## RabbitMQ, PgBouncer and Chromium (needed by the broker, pooler and dashboard browser tests).
deps:
	@bash scripts/deps.sh

vet:
	$(GO) vet ./...

test: deps vet
	bash scripts/test.sh

## lint: gofmt, go vet and staticcheck (pinned; fetched through the module proxy).
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint: vet
	@test -z "$$(gofmt -l .)" || (gofmt -l . && exit 1)
	$(GO) run $(STATICCHECK) ./...

## bench: BENCH_FLAGS passes flags through, e.g. make bench BENCH_FLAGS='--runs 3'.
bench: deps
	$(GO) run ./cmd/skiplock bench $(BENCH_FLAGS)

## chaos: the short fault-injection profile (about 6 minutes); soak: 30 minutes of
## randomized faults from a printed seed (replay with: go run ./tools/chaos --soak --seed N).
## The harness is a test rig in tools/, not part of the skiplock binary.
chaos: deps
	$(GO) run ./tools/chaos

soak: deps
	$(GO) run ./tools/chaos --soak --duration 30m
