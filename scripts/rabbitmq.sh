#!/usr/bin/env bash
# scripts/rabbitmq.sh start|stop|status
#
# Runs a local RabbitMQ broker for skiplock's outbox/amqppub tests. It listens on
# 127.0.0.1:5672 with the default guest/guest user, which is what the tests use
# unless SKIPLOCK_TEST_AMQP_URL says otherwise.
#
#   start   install Debian's rabbitmq-server if it is missing, start it detached and
#           wait until it has booted; does nothing if it is already running
#   stop    stop the broker if it is running
#   status  exit 0 if the broker answers, 1 if not
#
# There is no systemd here: the broker is started with `rabbitmq-server -detached`.
# RABBITMQ_STARTUP_TIMEOUT (seconds, default 120) bounds the wait at start.
set -euo pipefail

TIMEOUT="${RABBITMQ_STARTUP_TIMEOUT:-120}"
export RABBITMQ_NODE_IP_ADDRESS="${RABBITMQ_NODE_IP_ADDRESS:-127.0.0.1}"

log() { echo "rabbitmq.sh: $*" >&2; }

installed() {
	dpkg -s rabbitmq-server >/dev/null 2>&1 && command -v rabbitmq-server >/dev/null 2>&1
}

install() {
	if installed; then
		return 0
	fi
	if [ "$(id -u)" -ne 0 ]; then
		log "rabbitmq-server is not installed and this is not root: install it with 'apt-get install rabbitmq-server'"
		exit 1
	fi
	log "installing rabbitmq-server with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends rabbitmq-server
}

running() {
	# ping answers only once the Erlang node is up; quiet and bounded.
	rabbitmqctl -q --timeout 5 ping >/dev/null 2>&1
}

start() {
	install
	if running; then
		log "already running"
		return 0
	fi
	log "starting rabbitmq-server on ${RABBITMQ_NODE_IP_ADDRESS}"
	rabbitmq-server -detached
	# The Erlang node needs a moment to register with epmd; await_startup fails at
	# once before that, so poll ping first, then let await_startup wait for boot.
	local deadline=$((SECONDS + TIMEOUT))
	until running; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			log "broker node did not come up within ${TIMEOUT}s; see /var/log/rabbitmq/"
			exit 1
		fi
		sleep 1
	done
	local left=$((deadline - SECONDS))
	[ "$left" -gt 0 ] || left=1
	if ! rabbitmqctl -q --timeout "$left" await_startup; then
		log "broker did not finish booting within ${TIMEOUT}s; see /var/log/rabbitmq/"
		exit 1
	fi
	log "ready on amqp://guest:guest@${RABBITMQ_NODE_IP_ADDRESS}:5672/"
}

stop() {
	if ! installed; then
		log "not installed, nothing to stop"
		return 0
	fi
	if ! running; then
		log "not running"
		return 0
	fi
	log "stopping"
	rabbitmqctl -q --timeout "$TIMEOUT" stop
}

status() {
	if installed && running; then
		echo "running"
		return 0
	fi
	echo "stopped"
	return 1
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
*)
	echo "usage: $0 start|stop|status" >&2
	exit 2
	;;
esac
