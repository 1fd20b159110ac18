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
citus_dir=""
cleanup() {
  [ $started_rabbit = 1 ] && bash scripts/rabbitmq.sh stop >/dev/null 2>&1 || true
  if [ -n "$citus_dir" ]; then
    bash scripts/citus.sh clean >/dev/null 2>&1 || true
    rm -rf "$citus_dir"
  fi
}
trap cleanup EXIT
# The Citus suite (docs/citus.md): a 3-node local cluster of its own, in a directory
# of its own, on three free loopback ports; Citus is built first if it is missing
# (scripts/citus.sh). Without Citus those tests skip, loudly; SKIPLOCK_REQUIRE_CITUS=1
# (CI) makes that a failure. SKIPLOCK_TEST_CITUS_URL already set: that cluster is used.
if [ -z "${SKIPLOCK_TEST_CITUS_URL:-}" ]; then
  citus_dir=$(mktemp -d "${TMPDIR:-/tmp}/skiplock-test-citus.XXXXXX")
  export SKIPLOCK_CITUS_DIR=$citus_dir
  # Three consecutive free ports from 9710 on.
  port=9710
  while (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null || (echo >"/dev/tcp/127.0.0.1/$((port + 1))") 2>/dev/null ||
    (echo >"/dev/tcp/127.0.0.1/$((port + 2))") 2>/dev/null; do
    port=$((port + 3))
  done
  export SKIPLOCK_CITUS_PORT=$port
  if bash scripts/citus.sh start >/dev/null; then
    SKIPLOCK_TEST_CITUS_URL=$(bash scripts/citus.sh url)
    export SKIPLOCK_TEST_CITUS_URL
  elif [ "${SKIPLOCK_REQUIRE_CITUS:-}" = 1 ]; then
    echo "test.sh: the Citus cluster did not start and SKIPLOCK_REQUIRE_CITUS=1" >&2
    exit 1
  else
    echo "test.sh: !!! no Citus cluster (see above): the Citus tests will be skipped" >&2
  fi
fi
# TestUserModuleRunsTheCLIAsATool: go get -tool, go mod tidy and go tool skiplock in a
# scratch module (builds the CLI without -race; the Go module proxy for what the cache lacks).
export SKIPLOCK_TEST_USER_MODULE=${SKIPLOCK_TEST_USER_MODULE:-1}
go test -race -count=1 -timeout 20m ${TESTFLAGS:-} ./...
bash scripts/deploy-check.sh
