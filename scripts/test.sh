#!/usr/bin/env bash
# The whole suite: starts the brokers the tests need, runs go test -race, stops them;
# then checks the example Kubernetes manifests (a Go module of their own).
set -euo pipefail
cd "$(dirname "$0")/.."
started_rabbit=0
if [ -x scripts/rabbitmq.sh ] || [ -f scripts/rabbitmq.sh ]; then
  if ! bash scripts/rabbitmq.sh status >/dev/null 2>&1; then
    bash scripts/rabbitmq.sh start && started_rabbit=1
  fi
fi
cleanup() { [ $started_rabbit = 1 ] && bash scripts/rabbitmq.sh stop >/dev/null 2>&1 || true; }
trap cleanup EXIT
# TestUserModuleRunsTheCLIAsATool: go get -tool, go mod tidy and go tool skiplock in a
# scratch module (builds the CLI without -race; the Go module proxy for what the cache lacks).
export SKIPLOCK_TEST_USER_MODULE=${SKIPLOCK_TEST_USER_MODULE:-1}
go test -race -count=1 -timeout 20m ${TESTFLAGS:-} ./...
bash scripts/deploy-check.sh
