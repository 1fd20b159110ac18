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
