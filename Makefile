# skiplock — the two commands a newcomer needs: `make demo` and `make test`.
GO ?= go
export PATH := /usr/local/go/bin:$(PATH)

.PHONY: demo test deps vet lint bench chaos soak build release release-check image deploy-check

## demo needs only the PostgreSQL server binaries, not the test suite's brokers and browser.
demo:
	@SKIPLOCK_DEPS=postgres bash scripts/deps.sh
	$(GO) run ./cmd/skiplock demo

build:
	$(GO) build ./...

## release: the CLI for linux and darwin, amd64 and arm64, static and reproducible, with
## SHA256SUMS, under dist/ (VERSION=v1.2.3 to name it; default: git describe).
release:
	bash scripts/release.sh

## release-check: release, then linux/amd64 again from an empty build cache: same bytes.
release-check:
	bash scripts/release.sh --check

## image: the container image (Containerfile, FROM scratch) from dist/'s linux/amd64
## binary, built with podman (installed when missing) and inspected, never run.
image: release
	@SKIPLOCK_DEPS=image bash scripts/deps.sh
	bash scripts/image.sh

## deploy-check: decode the example Kubernetes manifests and check the project's rules.
deploy-check:
	bash scripts/deploy-check.sh

## deps installs what is missing on a fresh Debian machine: PostgreSQL server binaries,
## RabbitMQ, PgBouncer and Chromium (needed by the broker, pooler and dashboard browser tests),
## what building Citus needs (scripts/citus.sh; the Citus tests) and podman (make image, CI).
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

## chaos: the short fault-injection profile (about 9 minutes, Python and Node workers SIGKILLed among them, then the failover
## scenarios on a pg_auto_failover cluster: scripts/ha.sh, directly and through PgBouncer; last the 2 Citus rounds on a cluster
## of scripts/citus.sh, about 2 more minutes, skipped without Citus unless CI / SKIPLOCK_REQUIRE_CITUS); soak: 30 minutes of
## randomized faults from a printed seed (replay with: go run ./tools/chaos --soak --seed N),
## failovers and switchovers back among them.
## The harness is a test rig in tools/, not part of the skiplock binary.
chaos: deps
	$(GO) run ./tools/chaos

soak: deps
	$(GO) run ./tools/chaos --soak --duration 30m
