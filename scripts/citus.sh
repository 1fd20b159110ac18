#!/usr/bin/env bash
# scripts/citus.sh build|start|stop|status|url|clean|add-worker [N]|stop-node NODE [MODE]
#
# A local Citus cluster for skiplock's distributed mode (docs/citus.md): one coordinator
# and two worker nodes on loopback ports, each with its own data directory and
# shared_preload_libraries = 'citus', the workers added to the coordinator.
#
#   build   install the citus extension into the PostgreSQL that pg_config names, unless
#           it is there already (see "Where Citus comes from" below)
#   start   build if needed, then initdb the three nodes (first time), start them and add
#           the workers; does nothing to a node that is already up
#   stop    stop the nodes that are running (fast shutdown); the data stays for the
#           next start
#   status  print each node's state; exit 0 only if all are up
#   url     print the coordinator's connection URL
#   clean   stop, then remove the cluster's directory
#   add-worker [N]
#           online growth: make sure worker node N (default 3, at the coordinator's
#           port + N) exists, runs and is in the cluster (citus_add_node); the
#           cluster must be up. Idempotent: a worker already added is left alone.
#           Moving shards onto it is citus_rebalance_start()'s job (docs/citus.md,
#           "Online growth"). From then on start, stop and status include it.
#   installed
#           exit 0 when Citus is installed for pg_config's PostgreSQL (nothing built)
#   stop-node NODE [fast|immediate]
#           stop one node (coordinator, worker1, …) with pg_ctl's mode (default
#           fast; immediate is a crash); start brings it back
#
# Where Citus comes from, first match wins:
#   * already installed: citus.control and citus.so in pg_config's directories;
#   * SKIPLOCK_CITUS_PACKAGE=<name>: apt-get install that package (e.g.
#     postgresql-15-citus-13.2 from Citus's own repository, which the machine must
#     have configured);
#   * SKIPLOCK_CITUS_ARCHIVE=<path>: a source archive of a Citus release (a .tar.gz of the
#     tag), built and installed; SKIPLOCK_CITUS_SHA256 is its expected checksum
#     (default: the checksum of v13.2.2 below);
#   * otherwise the vendored v13.2.2 archive beside the repository
#     (../shared/vendor/citus-13.2.2.tar.gz, or ../../shared/vendor/ for a checkout one
#     level deeper), built and installed.
# Every archive is checked against the expected sha256 before it is unpacked.
#
# Environment:
#   PG_CONFIG              pg_config of the PostgreSQL to use (default: the newest
#                          /usr/lib/postgresql/*/bin/pg_config, else pg_config on PATH)
#   SKIPLOCK_CITUS_DIR     the cluster's directory (default ${TMPDIR:-/tmp}/skiplock-citus)
#   SKIPLOCK_CITUS_PORT    the coordinator's port; the workers take the next two
#                          (default 9700), an added worker N the coordinator's + N
#
# PostgreSQL refuses to run as root: as root, the data directories are handed to the
# unprivileged "postgres" user (Debian's package creates it) and every server command
# runs as that user, as internal/pgcluster does for the tests' servers. Installing
# (make install, apt-get) needs root or sudo.
#
# The nodes run with fsync off: a throwaway test cluster, not a place for data.
set -euo pipefail

CITUS_VERSION=13.2.2
CITUS_SHA256=dd2453caec20a830e5e63f1def5c5a98cb6f57ae510407cdcd800916fcdab430

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

log() { echo "citus.sh: $*" >&2; }
die() {
	log "$*"
	exit 1
}

find_pg_config() {
	if [ -n "${PG_CONFIG:-}" ]; then
		[ -x "$PG_CONFIG" ] || die "PG_CONFIG=$PG_CONFIG is not an executable"
		echo "$PG_CONFIG"
		return
	fi
	local newest
	newest=$(ls -d /usr/lib/postgresql/*/bin/pg_config 2>/dev/null | sort -t/ -k5 -n | tail -1 || true)
	if [ -n "$newest" ]; then
		echo "$newest"
	elif command -v pg_config >/dev/null 2>&1; then
		command -v pg_config
	else
		die "pg_config not found: install postgresql-server-dev-<major> (make deps does) or set PG_CONFIG"
	fi
}

PGCFG=$(find_pg_config)
BIN=$("$PGCFG" --bindir)
DIR=${SKIPLOCK_CITUS_DIR:-${TMPDIR:-/tmp}/skiplock-citus}
PORT=${SKIPLOCK_CITUS_PORT:-9700}
case "$PORT" in
'' | *[!0-9]*) die "SKIPLOCK_CITUS_PORT=$PORT is not a port number" ;;
esac
[ "$PORT" -ge 1024 ] && [ "$PORT" -le 65533 ] || die "SKIPLOCK_CITUS_PORT=$PORT: use 1024..65533 (the workers take the next two ports)"
# The nodes: the coordinator, the two first workers, and every worker added since
# (add-worker), in order.
nodes() {
	echo coordinator worker1 worker2
	local d n
	for d in "$DIR"/worker*/; do
		[ -f "$d/PG_VERSION" ] || continue
		n=$(basename "$d")
		n=${n#worker}
		case "$n" in '' | *[!0-9]*) continue ;; esac
		if [ "$n" -ge 3 ]; then echo "$n"; fi
	done | sort -n | while read -r n; do echo "worker$n"; done
}

port_of() {
	case "$1" in
	coordinator) echo "$PORT" ;;
	worker*) echo $((PORT + ${1#worker})) ;;
	esac
}

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo -n"

# as_pg runs a command as the user the servers run as.
as_pg() {
	if [ "$(id -u)" -eq 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

installed() {
	[ -f "$("$PGCFG" --sharedir)/extension/citus.control" ] && [ -f "$("$PGCFG" --pkglibdir)/citus.so" ]
}

# build_archive unpacks, patches, configures, builds and installs one source archive.
build_archive() {
	local archive=$1 want=$2
	[ -f "$archive" ] || die "no Citus source archive at $archive (set SKIPLOCK_CITUS_ARCHIVE or SKIPLOCK_CITUS_PACKAGE, see the top of $0)"
	local got
	got=$(sha256sum "$archive" | cut -d' ' -f1)
	[ "$got" = "$want" ] || die "$archive: sha256 $got, want $want (set SKIPLOCK_CITUS_SHA256 for another release)"
	local work
	work=$(mktemp -d "${TMPDIR:-/tmp}/skiplock-citus-build.XXXXXX")
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" EXIT
	tar -xzf "$archive" -C "$work"
	local src
	src=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -1)
	[ -f "$src/configure" ] || die "$archive holds no Citus source tree (no configure at its top)"
	# Newer PostgreSQL 15 minors export have_createdb_privilege() from
	# commands/dbcommands.h; Citus 13.2.2 defines its own static inline copy for PG 15,
	# which then fails to compile. Drop the copy only when the installed headers
	# declare the function and the source still defines it.
	local dbh
	dbh="$("$PGCFG" --includedir-server)/commands/dbcommands.h"
	if grep -q 'have_createdb_privilege' "$dbh" 2>/dev/null &&
		grep -q '^have_createdb_privilege(void)' "$src/src/include/pg_version_compat.h" 2>/dev/null; then
		log "patching pg_version_compat.h: this PostgreSQL exports have_createdb_privilege()"
		patch -d "$src" -p1 --quiet <"$here/citus/have-createdb-privilege.patch" ||
			die "the have_createdb_privilege patch does not apply to $archive"
	fi
	log "building Citus from $archive with $PGCFG (a few minutes; log: $work/build.log)"
	local jobs
	jobs=$(nproc 2>/dev/null || echo 2)
	if ! (cd "$src" && ./configure PG_CONFIG="$PGCFG" && make -j"$jobs") >"$work/build.log" 2>&1; then
		tail -40 "$work/build.log" >&2
		die "building Citus failed (the build packages: make deps installs them)"
	fi
	if ! (cd "$src" && $SUDO make install) >>"$work/build.log" 2>&1; then
		tail -20 "$work/build.log" >&2
		die "installing Citus failed (make install needs root or sudo)"
	fi
	rm -rf "$work"
	trap - EXIT
}

build() {
	if installed; then
		log "citus is installed for $("$PGCFG" --version)"
		return 0
	fi
	if [ -n "${SKIPLOCK_CITUS_PACKAGE:-}" ]; then
		log "installing the package $SKIPLOCK_CITUS_PACKAGE"
		$SUDO apt-get install -y -q --no-install-recommends "$SKIPLOCK_CITUS_PACKAGE" ||
			die "apt-get install $SKIPLOCK_CITUS_PACKAGE failed"
	elif [ -n "${SKIPLOCK_CITUS_ARCHIVE:-}" ]; then
		build_archive "$SKIPLOCK_CITUS_ARCHIVE" "${SKIPLOCK_CITUS_SHA256:-$CITUS_SHA256}"
	else
		# The vendored archive beside the repository (a checkout one level deeper, such
		# as a CI clone in a directory of its own, finds it one level up).
		local archive="$repo/../shared/vendor/citus-$CITUS_VERSION.tar.gz"
		[ -f "$archive" ] || [ ! -f "$repo/../../shared/vendor/citus-$CITUS_VERSION.tar.gz" ] ||
			archive="$repo/../../shared/vendor/citus-$CITUS_VERSION.tar.gz"
		build_archive "$archive" "$CITUS_SHA256"
	fi
	installed || die "citus is still not installed for $("$PGCFG" --version) after the build"
	log "citus installed"
}

url() { echo "postgres://postgres@127.0.0.1:$PORT/postgres?sslmode=disable"; }

# psql_at runs one SQL command on a node, as postgres, over the node's socket.
psql_at() {
	local port=$1
	shift
	as_pg env PGOPTIONS="-c client_min_messages=warning" "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$DIR" -p "$port" -U postgres -d postgres -tA "$@"
}

running() { as_pg "$BIN/pg_ctl" -D "$DIR/$1" status >/dev/null 2>&1; }

init_node() {
	local node=$1 port
	port=$(port_of "$node")
	[ -f "$DIR/$node/PG_VERSION" ] && return 0
	as_pg "$BIN/initdb" -D "$DIR/$node" -U postgres -A trust -E UTF8 --locale=C --no-instructions >/dev/null
	cat >>"$DIR/$node/postgresql.conf" <<EOF

# skiplock's local Citus cluster (scripts/citus.sh)
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$DIR'
shared_preload_libraries = 'citus'
max_connections = 300
shared_buffers = '128MB'
max_wal_size = '1GB'
timezone = 'UTC'
log_timezone = 'UTC'
fsync = off
synchronous_commit = off
full_page_writes = off
max_prepared_transactions = 100
citus.max_client_connections = 250
EOF
}

# up_node initdbs a node (first time), starts it unless it runs, and creates the
# extension in it.
up_node() {
	local node=$1 port
	port=$(port_of "$node")
	init_node "$node"
	if ! running "$node"; then
		if (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			die "port $port ($node) is taken by another program: choose another SKIPLOCK_CITUS_PORT"
		fi
		as_pg "$BIN/pg_ctl" -D "$DIR/$node" -l "$DIR/$node.log" -w -t 60 -o "-p $port" start >/dev/null ||
			die "$node did not start; see $DIR/$node.log"
	fi
	psql_at "$port" -c "CREATE EXTENSION IF NOT EXISTS citus"
}

# join adds a worker node to the coordinator, unless it is in already.
join() {
	local port
	port=$(port_of "$1")
	if [ "$(psql_at "$PORT" -c "SELECT count(*) FROM pg_dist_node WHERE nodename = '127.0.0.1' AND nodeport = $port")" = 0 ]; then
		psql_at "$PORT" -c "SELECT citus_add_node('127.0.0.1', $port)" >/dev/null
	fi
}

start() {
	build
	mkdir -p "$DIR"
	[ "$(id -u)" -ne 0 ] || chown postgres:postgres "$DIR"
	local all node
	all=$(nodes)
	for node in $all; do
		up_node "$node"
	done
	psql_at "$PORT" -c "SELECT citus_set_coordinator_host('127.0.0.1', $PORT)" >/dev/null
	local want=0 ports=""
	for node in $all; do
		[ "$node" = coordinator ] && continue
		join "$node"
		want=$((want + 1))
		ports="$ports :$(port_of "$node")"
	done
	local workers
	workers=$(psql_at "$PORT" -c "SELECT count(*) FROM citus_get_active_worker_nodes()")
	[ "$workers" = "$want" ] || die "the coordinator sees $workers active workers, want $want"
	log "up: coordinator 127.0.0.1:$PORT, workers$ports ($DIR)"
	url
}

# add_worker makes sure worker node N runs and is in the cluster (online growth).
add_worker() {
	local n=${1:-3}
	case "$n" in
	'' | *[!0-9]*) die "add-worker $n: N is a worker number (3 or more)" ;;
	esac
	[ "$n" -ge 3 ] || die "add-worker $n: workers 1 and 2 are the cluster's own (start); add 3 or more"
	[ $((PORT + n)) -le 65535 ] || die "add-worker $n: port $((PORT + n)) is past 65535"
	running coordinator || die "the cluster is not up: run $0 start first"
	up_node "worker$n"
	join "worker$n"
	[ "$(psql_at "$PORT" -c "SELECT count(*) FROM citus_get_active_worker_nodes() WHERE node_port = $((PORT + n))")" = 1 ] ||
		die "worker$n (:$((PORT + n))) is not an active worker of the coordinator"
	log "worker$n 127.0.0.1:$((PORT + n)) is in the cluster; move shards onto it with SELECT citus_rebalance_start()"
}

# stop_node stops one node with pg_ctl's mode: fast (default) or immediate (a crash).
stop_node() {
	local node=${1:-} mode=${2:-fast}
	case "$mode" in fast | immediate) ;; *) die "stop-node $node $mode: the mode is fast or immediate" ;; esac
	case " $(nodes | tr '\n' ' ') " in
	*" $node "*) ;;
	*) die "stop-node: no node '$node' (have: $(nodes | tr '\n' ' '))" ;;
	esac
	if running "$node"; then
		# A loaded machine can take a while to reap a crashed node's processes.
		as_pg "$BIN/pg_ctl" -D "$DIR/$node" -m "$mode" -w -t 180 stop >/dev/null ||
			die "$node did not stop; see $DIR/$node.log"
		log "$node stopped ($mode)"
	fi
}

stop() {
	[ -d "$DIR" ] || return 0
	local node
	for node in $(nodes); do
		if [ -f "$DIR/$node/PG_VERSION" ] && running "$node"; then
			as_pg "$BIN/pg_ctl" -D "$DIR/$node" -m fast -w -t 60 stop >/dev/null ||
				die "$node did not stop; see $DIR/$node.log"
			log "$node stopped"
		fi
	done
}

status() {
	local up=0 all=0 node
	for node in $(nodes); do
		all=$((all + 1))
		if [ -f "$DIR/$node/PG_VERSION" ] && running "$node"; then
			echo "$node 127.0.0.1:$(port_of "$node") up"
			up=$((up + 1))
		else
			echo "$node 127.0.0.1:$(port_of "$node") down"
		fi
	done
	[ "$up" = "$all" ]
}

clean() {
	stop
	rm -rf "$DIR"
}

case "${1:-}" in
build) build ;;
start) start ;;
stop) stop ;;
status) status ;;
url) url ;;
clean) clean ;;
add-worker) add_worker "${2:-3}" ;;
installed)
	installed || die "citus is not installed for $("$PGCFG" --version)"
	;;
stop-node) stop_node "${2:-}" "${3:-fast}" ;;
*)
	echo "usage: $0 build|installed|start|stop|status|url|clean|add-worker [N]|stop-node NODE [fast|immediate]" >&2
	exit 2
	;;
esac
