#!/usr/bin/env bash
# Installs what skiplock's demo and tests need and is missing. Idempotent.
set -euo pipefail
need=()
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
  need+=(postgresql)
fi
if [ "${SKIPLOCK_DEPS:-all}" = all ]; then
  command -v rabbitmq-server >/dev/null 2>&1 || [ -x /usr/sbin/rabbitmq-server ] || need+=(rabbitmq-server)
  command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || need+=(pgbouncer)
  # Headless Chromium drives the dashboard's browser tests (dashboard/browser_test.go).
  [ -x /usr/bin/chromium ] || command -v chromium >/dev/null 2>&1 || need+=(chromium)
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "deps: installing ${need[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # Debian starts the services it installs where it can; skiplock starts its own.
  if [ "$(id -u)" -eq 0 ]; then
    command -v rabbitmqctl >/dev/null 2>&1 && rabbitmqctl stop >/dev/null 2>&1 || true
  fi
fi
