#!/usr/bin/env bash
# Installs what skiplock's demo, tests and CI need and is missing. Idempotent.
set -euo pipefail
# SKIPLOCK_DEPS: all (the default: the test suite and CI), postgres (make demo), image
# (make image: only podman, which builds the container image).
deps=${SKIPLOCK_DEPS:-all}
need=()
if [ "$deps" != image ] && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
  need+=(postgresql)
fi
# podman builds and inspects the container image (scripts/image.sh; CI runs it).
if { [ "$deps" = all ] || [ "$deps" = image ]; } && ! command -v podman >/dev/null 2>&1; then
  need+=(podman)
fi
if [ "${SKIPLOCK_DEPS:-all}" = all ]; then
  command -v rabbitmq-server >/dev/null 2>&1 || [ -x /usr/sbin/rabbitmq-server ] || need+=(rabbitmq-server)
  command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || need+=(pgbouncer)
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
if [ ${#need[@]} -gt 0 ]; then
  echo "deps: installing ${need[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # Debian starts the services it installs where it can; skiplock starts its own.
  if [ "$(id -u)" -eq 0 ]; then
    command -v rabbitmqctl >/dev/null 2>&1 && rabbitmqctl stop >/dev/null 2>&1 || true
  fi
fi
# Citus: scripts/citus.sh builds it from source when the citus extension is missing
# (scripts/test.sh starts a cluster for the Citus tests), which needs the server headers
# of the PostgreSQL major in use and these libraries. Installed here, before any cluster
# starts: postgresql-server-dev-N may bring a newer PostgreSQL minor release, and a
# server still running the old binaries then fails to load plpgsql.so.
if [ "$deps" = all ]; then
  pgmajor=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | cut -d/ -f5 | sort -n | tail -1 || true)
  if [ -n "$pgmajor" ] && ! [ -f "/usr/share/postgresql/$pgmajor/extension/citus.control" ]; then
    citus_need=()
    for p in "postgresql-server-dev-$pgmajor" gcc make flex bison libcurl4-openssl-dev liblz4-dev libzstd-dev \
      libkrb5-dev libssl-dev libxslt1-dev libreadline-dev; do
      dpkg -s "$p" >/dev/null 2>&1 || citus_need+=("$p")
    done
    if [ ${#citus_need[@]} -gt 0 ]; then
      echo "deps: installing what building Citus needs: ${citus_need[*]}" >&2
      $SUDO apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${citus_need[@]}" >/dev/null
    fi
  fi
fi
# The Python client's tests (clients/python, TestPythonClient) run on Debian's
# python3 with psycopg 3.
if [ "${SKIPLOCK_DEPS:-all}" = all ] && ! /usr/bin/python3 -c 'import psycopg' >/dev/null 2>&1; then
  echo "deps: installing python3-psycopg (the Python client's tests)" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3 python3-psycopg >/dev/null
fi
# The Node client's tests (clients/node, TestNodeClient, the conformance suite) run on
# Debian's nodejs and npm; the Go test runs `npm ci`, which needs the npm registry.
if [ "${SKIPLOCK_DEPS:-all}" = all ] && ! { command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; }; then
  echo "deps: installing nodejs and npm (the Node client's tests)" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
# Headless Chromium drives the dashboard's browser tests (dashboard/browser_test.go).
# It is installed on its own: should it be unavailable, the rest of the suite still
# runs and those tests skip, loudly.
if [ "${SKIPLOCK_DEPS:-all}" = all ] && ! [ -x /usr/bin/chromium ] && ! command -v chromium >/dev/null 2>&1; then
  echo "deps: installing chromium (the dashboard's browser tests)" >&2
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null; } ||
    echo "deps: !!! chromium could not be installed; the dashboard's browser tests will be skipped" >&2
fi
# pg_auto_failover runs the HA cluster of the failover chaos scenarios (scripts/ha.sh;
# make chaos, CI). Its own block: it installs the extension for the PostgreSQL major
# already on the machine, never another server.
if [ "${SKIPLOCK_DEPS:-all}" = all ] && ! command -v pg_autoctl >/dev/null 2>&1; then
  pgmajor=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sed 's|/usr/lib/postgresql/\([0-9]*\)/bin|\1|' | sort -n | tail -n1)
  pgmajor=${pgmajor:-15}
  echo "deps: installing postgresql-${pgmajor}-auto-failover (the HA cluster of make chaos's failover scenarios)" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "postgresql-${pgmajor}-auto-failover" >/dev/null
fi
