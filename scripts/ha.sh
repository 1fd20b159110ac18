#!/usr/bin/env bash
# scripts/ha.sh start|stop|status|uri|failover|kill|sync|async|wait|destroy|pgbouncer|pgbouncer-uri|events
#
# A real high-availability PostgreSQL on loopback, run by pg_auto_failover (Debian's
# postgresql-15-auto-failover): a monitor, a primary and a standby with synchronous
# replication. It is the engine a platform team runs in production, started the way
# its documentation does (pg_autoctl create / run), not a hand-made promotion script;
# docs/operations.md ("High availability") says why pg_auto_failover rather than
# Patroni + etcd, and which settings matter. The chaos harness's failover scenarios
# (tools/chaos, make chaos) drive it through this script.
#
#   start     create what does not exist yet (monitor, node1, node2), run what is not
#             running, and wait until one node is primary and the other secondary
#             (a synchronous one: see wait). Idempotent: a stopped or killed node is
#             started again, and rejoins as a standby if the other was promoted
#             meanwhile.
#   stop      stop both nodes, then the monitor (fast shutdown); waits until they are gone
#   status    the monitor's view (pg_autoctl show state); exit 0 when one node is
#             primary and the other secondary, 1 otherwise
#   uri       the application's connection string: both nodes, target_session_attrs=read-write
#   failover  a planned switchover (pg_autoctl perform failover): the primary is demoted,
#             the standby promoted; starts once the primary's commits wait for the
#             standby (pg_stat_replication), waits until the old primary has rejoined
#             as a synchronous secondary
#   kill      SIGKILL the primary's pg_autoctl and postgres (its whole process group), as
#             if its machine were lost; the monitor promotes the standby. Prints the
#             killed node's name; `start` brings it back: as a standby once the other
#             was promoted (see `status`), as the primary again if it is back before that
#   sync      both nodes in the replication quorum (the default): commits wait for the standby
#   async     neither in the quorum: the primary commits without waiting (asynchronous
#             replication, for measuring what a lost primary loses)
#   wait      wait until one node is primary and the other secondary, and (unless
#             `async`) the primary's commits wait for it (SKIPLOCK_HA_WAIT s)
#   destroy   stop, then remove SKIPLOCK_HA_DIR
#   pgbouncer start PgBouncer (Debian's pgbouncer, transaction pooling) on the port after
#             node2's (another, printed and kept for pgbouncer-uri, when that one is
#             in use), in front of the current primary, and its follower: a loop that
#             asks the monitor for the writable node (pgautofailover.get_primary) every
#             0.25 s and, when it changes, rewrites PgBouncer's [databases] entry,
#             reloads it and drops any server connection to the old node still open
#             (KILL, RESUME: see repoint), so no transaction runs there once the
#             monitor names the new primary. Idempotent; the cluster must be
#             started; `stop` stops both. docs/operations.md ("High availability")
#             says why a follower rather than PgBouncer's own host list.
#   pgbouncer-uri  the application's connection string through PgBouncer
#   follow    the follower's loop (what `pgbouncer` runs in the background)
#   events    the monitor's last 500 events (pg_autoctl show events): every state
#             each node was assigned and reported, with the monitor's reason
#
# Environment:
#   SKIPLOCK_HA_DIR     where the nodes live, one data directory each (monitor/, node1/,
#                       node2/) with their pg_autoctl configuration, state and log.
#                       Default ${TMPDIR:-/tmp}/skiplock-ha
#   SKIPLOCK_HA_PORT    the monitor's port; node1 and node2 take the next two, PgBouncer
#                       (`pgbouncer`) the one after. Fixed at
#                       creation (kept in $SKIPLOCK_HA_DIR/ports). Default 6540
#   SKIPLOCK_HA_TIMING  "default" (pg_auto_failover's own health checks: a lost primary is
#                       replaced after about 50 s) or "fast" (loopback tests: about 10 s;
#                       see docs/operations.md). Applied at every start. Default: default
#   SKIPLOCK_HA_WAIT    seconds `start`, `wait` and `failover` wait. Default 120
#
# pg_autoctl refuses to run as root, as PostgreSQL does: as root, the script runs
# every pg_autoctl and PostgreSQL command as Debian's unprivileged "postgres" user and
# hands it the directory (what internal/pgcluster does for the tests' servers).
set -euo pipefail

DIR="${SKIPLOCK_HA_DIR:-${TMPDIR:-/tmp}/skiplock-ha}"
TIMING="${SKIPLOCK_HA_TIMING:-default}"
WAIT="${SKIPLOCK_HA_WAIT:-120}"
NODES=(node1 node2)

log() { echo "ha.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# A node's processes run in sessions of their own (setsid); a hangup meant for whoever
# started this script must not stop it halfway through a start.
trap '' HUP

case "$TIMING" in default | fast) ;; *) die "SKIPLOCK_HA_TIMING must be default or fast, not '$TIMING'" ;; esac
case "$WAIT" in '' | *[!0-9]*) die "SKIPLOCK_HA_WAIT must be a number of seconds, not '$WAIT'" ;; esac

pgbin() {
	local d
	for d in /usr/lib/postgresql/15/bin $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -rV); do
		[ -x "$d/pg_ctl" ] && { echo "$d"; return; }
	done
	die "PostgreSQL server binaries not found (apt-get install postgresql-15)"
}

require() {
	command -v pg_autoctl >/dev/null 2>&1 ||
		die "pg_autoctl not found: install postgresql-15-auto-failover (make deps does)"
	BIN="$(pgbin)"
}

# pg_cmd sets CMD to a command that runs "$@" as the user that owns the cluster, with
# pg_autoctl's configuration, state and runtime files kept under $DIR; as_pg runs it.
pg_cmd() {
	CMD=(env XDG_CONFIG_HOME="$DIR/.config" XDG_DATA_HOME="$DIR/.local" XDG_RUNTIME_DIR="$DIR/.run"
		PG_CONFIG="$BIN/pg_config" PATH="$BIN:/usr/bin:/bin" LC_ALL=C TZ=UTC HOME="$DIR" "$@")
	if [ "$(id -u)" -eq 0 ]; then
		# setpriv changes user and execs: no parent process stays behind (runuser's
		# would, around every node's long-lived pg_autoctl).
		CMD=(setpriv --reuid=postgres --regid=postgres --init-groups "${CMD[@]}")
	fi
}

as_pg() {
	pg_cmd "$@"
	"${CMD[@]}"
}

ports() {
	if [ -f "$DIR/ports" ]; then
		read -r MPORT P1 P2 <"$DIR/ports"
	else
		MPORT="${SKIPLOCK_HA_PORT:-6540}"
		case "$MPORT" in '' | *[!0-9]*) die "SKIPLOCK_HA_PORT must be a port number, not '$MPORT'" ;; esac
		P1=$((MPORT + 1)) P2=$((MPORT + 2))
	fi
}

# PgBouncer's port is the one after node2's unless `pgbouncer` had to take another
# (recorded in pgbouncer/port).
port_of() {
	case "$1" in
	monitor) echo "$MPORT" ;;
	node1) echo "$P1" ;;
	node2) echo "$P2" ;;
	pgbouncer) if [ -s "$DIR/pgbouncer/port" ]; then head -n1 "$DIR/pgbouncer/port"; else echo $((P2 + 1)); fi ;;
	esac
}
monitor_url() { echo "postgres://autoctl_node@127.0.0.1:$MPORT/pg_auto_failover?sslmode=disable"; }
app_uri() { echo "postgres://postgres@127.0.0.1:$P1,127.0.0.1:$P2/postgres?target_session_attrs=read-write&sslmode=disable"; }
# Through PgBouncer < 1.21 in transaction pooling, pgx must not keep named prepared
# statements: exec mode sends each statement's parse with its execution.
bouncer_uri() { echo "postgres://postgres@127.0.0.1:$(port_of pgbouncer)/postgres?sslmode=disable&default_query_exec_mode=exec"; }

# pid of a node's pg_autoctl supervisor, if it runs.
node_pid() {
	local f="$DIR/.run/pg_autoctl$DIR/$1/pg_autoctl.pid" pid
	[ -f "$f" ] || return 1
	pid="$(head -n1 "$f" 2>/dev/null)"
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

# clear_stale_lock removes a node's postmaster.pid left by a SIGKILL (`kill`) when no
# postmaster of this node holds it: like a rebooted machine. On a busy host the dead
# postmaster's pid soon names another process of the postgres user (pid_max may be
# 32768), and PostgreSQL would then refuse to start ("Is another postmaster running?")
# — pg_autoctl, seeing the pid is not its postmaster, waits for ever. `kill` takes the
# node's whole process group, backends included, so no process of the old instance
# remains attached to its shared memory.
clear_stale_lock() {
	local f="$DIR/$1/postmaster.pid" pid
	[ -f "$f" ] || return 0
	pid="$(head -n1 "$f" 2>/dev/null || true)"
	if [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "-D $DIR/$1 "; then
		return 0
	fi
	log "$1: removing the stale postmaster.pid (pid $pid is not its postmaster)"
	rm -f "$f"
}

run_node() {
	local n="$1"
	if node_pid "$n" >/dev/null; then
		return 0
	fi
	clear_stale_lock "$n"
	log "running $n (port $(port_of "$n")); log: $DIR/$n.log"
	# setsid: the node is its own process group (what `kill` signals), and outlives
	# this script and its terminal.
	pg_cmd setsid pg_autoctl run --pgdata "$DIR/$n"
	(exec "${CMD[@]}" >>"$DIR/$n.log" 2>&1 </dev/null) &
	local deadline=$((SECONDS + 30))
	until node_pid "$n" >/dev/null; do
		[ "$SECONDS" -lt "$deadline" ] || die "$n did not start; see $DIR/$n.log"
		sleep 0.2
	done
}

monitor_sql() { as_pg "$BIN/psql" -X -q -At -h 127.0.0.1 -p "$MPORT" -U postgres -d pg_auto_failover -c "$1"; }

# The monitor's health checks. default: pg_auto_failover's (a node is unhealthy after
# 20 s without contact, the monitor waits 30 s for a lost primary to demote itself).
# fast: for loopback tests; the keepers' network_partition_timeout (after which an
# isolated primary demotes itself) stays below primary_demote_timeout, as it must.
apply_timing() {
	local period=5000 timeout=5000 retries=2 delay=2000 unhealthy=20000 demote=30000 partition=20
	if [ "$TIMING" = fast ]; then
		period=1000 timeout=1000 retries=1 delay=500 unhealthy=3000 demote=6000 partition=4
	fi
	local kv
	for kv in health_check_period=$period health_check_timeout=$timeout health_check_max_retries=$retries \
		health_check_retry_delay=$delay node_considered_unhealthy_timeout=$unhealthy primary_demote_timeout=$demote; do
		monitor_sql "ALTER SYSTEM SET pgautofailover.${kv%%=*} = ${kv#*=}" >/dev/null
	done
	monitor_sql "SELECT pg_reload_conf()" >/dev/null
	local n
	for n in "${NODES[@]}"; do
		[ -d "$DIR/$n" ] && as_pg pg_autoctl config set --pgdata "$DIR/$n" timeout.network_partition_timeout "$partition" >/dev/null 2>&1
	done
	return 0
}

create_monitor() {
	[ -f "$DIR/monitor/PG_VERSION" ] && return 0
	log "creating the monitor on 127.0.0.1:$MPORT"
	as_pg pg_autoctl create monitor --pgdata "$DIR/monitor" --pgport "$MPORT" --hostname 127.0.0.1 \
		--auth trust --no-ssl >>"$DIR/monitor.log" 2>&1 || die "creating the monitor failed; see $DIR/monitor.log"
	as_pg pg_autoctl config set --pgdata "$DIR/monitor" postgresql.listen_addresses 127.0.0.1 >/dev/null
}

# create_node initialises the first node itself (initdb, with the settings below) and
# registers it; the second is cloned from the primary by pg_autoctl (pg_basebackup,
# which copies postgresql.conf, so both nodes run with the same settings).
create_node() {
	local n="$1" port
	port="$(port_of "$n")"
	[ -f "$DIR/$n/PG_VERSION" ] && [ -f "$DIR/.config/pg_autoctl$DIR/$n/pg_autoctl.cfg" ] && return 0
	if [ "$n" = node1 ] && ! [ -f "$DIR/$n/PG_VERSION" ]; then
		as_pg "$BIN/initdb" -D "$DIR/$n" -U postgres -A trust -E UTF8 --locale=C --no-instructions >>"$DIR/$n.log" 2>&1 ||
			die "initdb $n failed; see $DIR/$n.log"
		cat >>"$DIR/$n/postgresql.conf" <<-EOF

			# skiplock HA test cluster (scripts/ha.sh)
			max_connections = 300
			shared_buffers = '128MB'
			synchronous_commit = on
			track_commit_timestamp = on
			timezone = 'UTC'
			log_timezone = 'UTC'
			log_min_messages = warning
		EOF
	fi
	log "creating $n on 127.0.0.1:$port"
	as_pg pg_autoctl create postgres --pgdata "$DIR/$n" --pgport "$port" --listen 127.0.0.1 --hostname 127.0.0.1 \
		--name "$n" --auth trust --no-ssl --monitor "$(monitor_url)" >>"$DIR/$n.log" 2>&1 ||
		die "creating $n failed; see $DIR/$n.log"
}

# state prints "<node> <reported> <assigned>" per node, from the monitor.
state() {
	monitor_sql "SELECT nodename, reportedstate, goalstate FROM pgautofailover.node ORDER BY nodeid" 2>/dev/null | tr '|' ' '
}

healthy() {
	local s
	s="$(state)" || return 1
	echo "$s" | grep -q '^node[12] primary primary$' && echo "$s" | grep -q '^node[12] secondary secondary$'
}

primary() { state | awk '$2 == "primary" && $3 == "primary" { print $1 }'; }

# sync_effective checks on the primary itself what the monitor's "primary" state
# promises: synchronous_standby_names is set and the standby streams as a synchronous
# (quorum) standby, so a commit returns only once the standby has it. The monitor's
# states are its view: it moves the primary to wait_primary (commits without a
# standby) whenever it finds the standby unhealthy, and a standby's health flaps right
# after it rejoins on a loaded machine. A switchover, or a round of the chaos
# harness, starts only once the primary's commits wait for the standby.
sync_effective() {
	local p
	p="$(primary)"
	[ -n "$p" ] || return 1
	[ "$(as_pg "$BIN/psql" -X -q -At -h 127.0.0.1 -p "$(port_of "$p")" -U postgres -d postgres -c \
		"SELECT current_setting('synchronous_standby_names') <> '' AND EXISTS (SELECT 1 FROM pg_stat_replication WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum'))" 2>/dev/null)" = t ]
}

# ready: a primary and a secondary, and — unless `async` took both nodes out of the
# replication quorum ($DIR/async) — the primary's commits waiting for the standby.
ready() { healthy && { [ -f "$DIR/async" ] || sync_effective; }; }

wait_healthy() {
	local deadline=$((SECONDS + WAIT))
	until ready; do
		[ "$SECONDS" -lt "$deadline" ] || { as_pg pg_autoctl show state --pgdata "$DIR/monitor" >&2 || true; die "no primary with a secondary (a synchronous one, unless async) within ${WAIT}s"; }
		sleep 0.3
	done
}

start() {
	require
	ports
	mkdir -p "$DIR/.config" "$DIR/.local" "$DIR/.run"
	[ -f "$DIR/ports" ] || echo "$MPORT $P1 $P2" >"$DIR/ports"
	[ "$(id -u)" -eq 0 ] && chown -R postgres: "$DIR"
	chmod 700 "$DIR/.run"
	create_monitor
	run_node monitor
	local deadline=$((SECONDS + 30))
	until monitor_sql "SELECT 1" >/dev/null 2>&1; do
		[ "$SECONDS" -lt "$deadline" ] || die "the monitor does not answer; see $DIR/monitor.log"
		sleep 0.2
	done
	apply_timing
	local n
	for n in "${NODES[@]}"; do
		create_node "$n"
		apply_timing
		run_node "$n"
		if [ "$n" = node1 ] && ! [ -f "$DIR/.run/created-node2" ]; then
			# node2 clones the primary: wait until node1 is one.
			deadline=$((SECONDS + WAIT))
			until state | grep -Eq '^node1 (single|primary) '; do
				[ "$SECONDS" -lt "$deadline" ] || die "node1 did not become primary; see $DIR/node1.log"
				sleep 0.3
			done
		fi
	done
	touch "$DIR/.run/created-node2"
	wait_healthy
	log "up: primary $(primary); connect with: $(app_uri)"
}

stop_node() {
	local n="$1" pid
	pid="$(node_pid "$n")" || return 0
	as_pg pg_autoctl stop --pgdata "$DIR/$n" >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
	local deadline=$((SECONDS + 60))
	while kill -0 "$pid" 2>/dev/null; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			log "$n did not stop within 60s; killing its process group"
			kill -KILL -- "-$pid" 2>/dev/null || true
			break
		fi
		sleep 0.2
	done
}

stop() {
	[ -d "$DIR" ] || return 0
	require
	ports
	stop_bouncer
	local n
	for n in "${NODES[@]}" monitor; do
		stop_node "$n"
	done
	log "stopped"
}

cmd_kill() {
	require
	ports
	local p pid
	p="$(primary)"
	[ -n "$p" ] || die "no primary to kill"
	pid="$(node_pid "$p")" || die "$p's pg_autoctl is not running"
	kill -KILL -- "-$pid"
	# pg_autoctl starts postgres in its process group; make sure the postmaster is gone too.
	local pm
	pm="$(head -n1 "$DIR/$p/postmaster.pid" 2>/dev/null || true)"
	[ -n "$pm" ] && kill -KILL "$pm" 2>/dev/null || true
	echo "$p"
}

cmd_failover() {
	require
	ports
	# A switchover promotes the standby while the primary drains: only what the standby
	# has is kept, so it starts once commits wait for the standby (ready), not merely
	# once the monitor names a primary and a secondary.
	wait_healthy
	local was
	was="$(primary)"
	as_pg pg_autoctl perform failover --pgdata "$DIR/monitor" --wait "$WAIT" >/dev/null 2>&1 ||
		die "pg_autoctl perform failover failed (see $DIR/monitor.log)"
	wait_healthy
	log "switched over: $was -> $(primary)"
}

# cmd_quorum puts both nodes in the replication quorum (true) or out of it (false), and
# waits until the primary's synchronous_standby_names says so.
cmd_quorum() {
	require
	ports
	wait_healthy
	local n p want
	for n in "${NODES[@]}"; do
		as_pg pg_autoctl set node replication-quorum --pgdata "$DIR/$n" "$1" >/dev/null 2>&1 ||
			die "pg_autoctl set node replication-quorum $1 failed for $n"
	done
	if [ "$1" = true ]; then rm -f "$DIR/async"; else touch "$DIR/async"; fi
	local deadline=$((SECONDS + WAIT))
	while :; do
		p="$(primary)"
		want=unknown
		if [ -n "$p" ]; then
			want="$(as_pg "$BIN/psql" -X -q -At -h 127.0.0.1 -p "$(port_of "$p")" -U postgres -d postgres -c "SHOW synchronous_standby_names" 2>/dev/null || echo unknown)"
		fi
		if { [ "$1" = true ] && [ -n "$want" ] && [ "$want" != unknown ]; } || { [ "$1" = false ] && [ -z "$want" ]; }; then
			break
		fi
		[ "$SECONDS" -lt "$deadline" ] || die "synchronous_standby_names on the primary (${p:-none}) is still '$want'"
		sleep 0.3
	done
	wait_healthy
	log "replication quorum $1: synchronous_standby_names = '$want'"
}

# PgBouncer in front of the pair (`pgbouncer`). PgBouncer 1.18's own host list is
# round-robin over every host, with no target_session_attrs: it would send writes to
# the standby. So one PgBouncer points at one node, the primary, and a follower moves
# it when the monitor names another (the monitor is the authority on which node may
# take writes; PostgreSQL itself refuses writes on the others, so a late move costs
# errors the clients retry, never a write on the wrong node).
bouncer_bin() {
	local p
	for p in /usr/sbin/pgbouncer /usr/bin/pgbouncer "$(command -v pgbouncer 2>/dev/null || true)"; do
		[ -n "$p" ] && [ -x "$p" ] && { echo "$p"; return; }
	done
	die "pgbouncer not found: apt-get install pgbouncer (make deps does)"
}

bouncer_pid() {
	local pid
	pid="$(head -n1 "$DIR/pgbouncer/pgbouncer.pid" 2>/dev/null)" || return 1
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

follower_pid() {
	local pid
	pid="$(head -n1 "$DIR/.run/follower.pid" 2>/dev/null)" || return 1
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

# The writable node as host:port, from the monitor; empty while there is none.
monitor_primary() {
	monitor_sql "SELECT primary_host || ':' || primary_port FROM pgautofailover.get_primary('default', 0)" 2>/dev/null || true
}

# bouncer_ini host port writes PgBouncer's configuration pointing at host:port. The
# settings that matter are described in docs/operations.md ("High availability").
bouncer_ini() {
	local d="$DIR/pgbouncer"
	cat >"$d/pgbouncer.ini.new" <<-EOF
		; written by scripts/ha.sh; the follower rewrites the [databases] entry
		[databases]
		* = host=$1 port=$2

		[pgbouncer]
		listen_addr = 127.0.0.1
		listen_port = $(port_of pgbouncer)
		unix_socket_dir =
		auth_type = trust
		auth_file = $d/users.txt
		admin_users = postgres
		pool_mode = transaction
		max_client_conn = 1000
		default_pool_size = 60
		reserve_pool_size = 10
		; after a failed connect (to a node being demoted or lost) PgBouncer refuses new
		; server connections this long, even once repointed: not the default 15 s
		server_login_retry = 0.5
		server_connect_timeout = 2
		; clients wait this long for a server connection before an error
		query_wait_timeout = 30
		ignore_startup_parameters = extra_float_digits
		log_connections = 0
		log_disconnections = 0
		logfile = $d/pgbouncer.log
		pidfile = $d/pgbouncer.pid
	EOF
	mv "$d/pgbouncer.ini.new" "$d/pgbouncer.ini"
	echo "$1:$2" >"$d/target"
}

cmd_pgbouncer() {
	require
	ports
	local bin d="$DIR/pgbouncer" target
	bin="$(bouncer_bin)"
	[ -f "$DIR/ports" ] || die "no cluster in $DIR: scripts/ha.sh start first"
	mkdir -p "$d"
	[ -f "$d/users.txt" ] || echo '"postgres" ""' >"$d/users.txt"
	if ! bouncer_pid >/dev/null; then
		target="$(monitor_primary)"
		[ -n "$target" ] || die "the monitor names no primary (see: scripts/ha.sh status)"
		# The port after node2's was free when the cluster started, but on a busy machine
		# an outgoing connection may since have taken it as its local port (it is in the
		# kernel's ephemeral range): then PgBouncer cannot bind it, and another port,
		# below that range, is taken instead.
		local port=$(($(port_of node2) + 1)) attempt deadline
		for attempt in 1 2 3 4 5; do
			echo "$port" >"$d/port"
			bouncer_ini "${target%:*}" "${target#*:}"
			: >"$d/pgbouncer.log"
			: >"$d/pgbouncer.out"
			[ "$(id -u)" -eq 0 ] && chown -R postgres: "$d"
			log "running pgbouncer on 127.0.0.1:$port -> $target; log: $d/pgbouncer.log"
			# Its log goes to logfile; what it prints before opening it, to pgbouncer.out.
			pg_cmd setsid "$bin" "$d/pgbouncer.ini"
			(exec "${CMD[@]}" >>"$d/pgbouncer.out" 2>&1 </dev/null) &
			deadline=$((SECONDS + 30))
			until bouncer_pid >/dev/null; do
				grep -qs "in use" "$d/pgbouncer.log" "$d/pgbouncer.out" && break
				[ "$SECONDS" -lt "$deadline" ] || die "pgbouncer did not start on port $port: $(tail -n 5 "$d/pgbouncer.log" "$d/pgbouncer.out" 2>&1 | tr '\n' ' ')"
				sleep 0.2
			done
			bouncer_pid >/dev/null && break
			log "port $port is in use; trying another"
			port=$((20000 + RANDOM % 12000))
		done
		bouncer_pid >/dev/null || die "pgbouncer found no free port in 5 tries: $(tail -n 5 "$d/pgbouncer.log" "$d/pgbouncer.out" 2>&1 | tr '\n' ' ')"
	fi
	if ! follower_pid >/dev/null; then
		log "running the pgbouncer follower; log: $d/follower.log"
		# As the caller (root, or the cluster's owner): it reads the monitor with psql
		# as as_pg does, writes PgBouncer's configuration and signals it.
		(SKIPLOCK_HA_DIR="$DIR" exec setsid bash "$0" follow >>"$d/follower.log" 2>&1 </dev/null) &
		local deadline=$((SECONDS + 10))
		until follower_pid >/dev/null; do
			[ "$SECONDS" -lt "$deadline" ] || die "the follower did not start; see $d/follower.log"
			sleep 0.1
		done
	fi
	log "pgbouncer up; connect with: $(bouncer_uri)"
}

bouncer_admin() { as_pg "$BIN/psql" -X -q -At -h 127.0.0.1 -p "$(port_of pgbouncer)" -U postgres -d pgbouncer "$@"; }

# servers_on host:port counts PgBouncer's server connections to that node.
servers_on() {
	{ bouncer_admin -c "SHOW SERVERS" 2>/dev/null || true; } | awk -F'|' -v a="${1%:*}" -v p="${1#*:}" '$5 == a && $6 == p { n++ } END { print n + 0 }'
}

# repoint old new pid moves PgBouncer from node old to node new (host:port each):
# rewrite [databases], RELOAD on the admin console (it answers once the new entry is in
# force; SIGHUP when the console does not answer), then, if any server connection to
# the old node is still open, KILL and RESUME each database.
# A reload alone closes a server connection to the old node only once its client
# releases it: a transaction still running there keeps its client on the old node —
# one whose commit waits for the standby that has just been promoted waits until the
# old node is stopped, however long its pg_autoctl takes (a switchover with the old
# keeper stalled for 54 s kept PgBouncer's clients there 46 s after the repoint).
# KILL drops every client and server connection of the database at once; its
# clients reconnect, and RESUME lets them in, to the new node. What was in flight fails, as a direct client's
# would: the old node's commits wait for a standby that no longer follows it. When
# the old node is already down (the usual switchover or a lost machine) nothing is
# left to cut, and the clients' connections, some of them already on the new node,
# are left alone.
repoint() {
	local old="$1" new="$2" pid="$3" d="$DIR/pgbouncer" before db what
	bouncer_ini "${new%:*}" "${new#*:}"
	[ "$(id -u)" -eq 0 ] && chown postgres: "$d/pgbouncer.ini" "$d/target"
	bouncer_admin -c RELOAD >/dev/null 2>&1 || kill -HUP "$pid"
	before="$(servers_on "$old")" what="no server connection to $old left"
	if [ "$before" -gt 0 ]; then
		for db in $({ bouncer_admin -c "SHOW DATABASES" 2>/dev/null || true; } | awk -F'|' '$1 != "pgbouncer" { print $1 }'); do
			bouncer_admin -c "KILL $db" -c "RESUME $db" >/dev/null 2>&1 || true
		done
		what="killed $before server connections to $old; $(servers_on "$old") left"
	fi
	echo "$(date -u +%FT%T.%3NZ) pgbouncer: $old -> $new (reloaded; $what)"
}

# follow (run by `pgbouncer`, in the background) repoints PgBouncer at the node the
# monitor names writable, as soon as it names another one (repoint).
follow() {
	require
	ports
	local d="$DIR/pgbouncer" cur want pid
	echo $$ >"$DIR/.run/follower.pid"
	cur="$(cat "$d/target" 2>/dev/null || true)"
	while pid="$(bouncer_pid)"; do
		want="$(monitor_primary)"
		if [ -n "$want" ] && [ "$want" != "$cur" ]; then
			repoint "$cur" "$want" "$pid"
			cur="$want"
		fi
		sleep 0.25
	done
	echo "$(date -u +%FT%T.%3NZ) pgbouncer is gone; the follower stops"
}

stop_bouncer() {
	local pid
	if pid="$(follower_pid)"; then
		kill -TERM "$pid" 2>/dev/null || true
	fi
	pid="$(bouncer_pid)" || return 0
	kill -TERM "$pid" 2>/dev/null || true
	local deadline=$((SECONDS + 30))
	while kill -0 "$pid" 2>/dev/null; do
		[ "$SECONDS" -lt "$deadline" ] || { kill -KILL "$pid" 2>/dev/null || true; break; }
		sleep 0.1
	done
}

cmd="${1:-}"
[ $# -le 1 ] || die "unexpected arguments after '$cmd' (usage: scripts/ha.sh start|stop|status|uri|failover|kill|sync|async|wait|destroy|pgbouncer|pgbouncer-uri|events)"
case "$cmd" in
start) start ;;
stop) stop ;;
status)
	require
	ports
	as_pg pg_autoctl show state --pgdata "$DIR/monitor" 2>/dev/null || { log "the monitor does not answer"; exit 1; }
	healthy
	;;
uri)
	ports
	app_uri
	;;
failover) cmd_failover ;;
pgbouncer) cmd_pgbouncer ;;
pgbouncer-uri)
	ports
	bouncer_uri
	;;
follow) follow ;;
events)
	require
	ports
	as_pg pg_autoctl show events --pgdata "$DIR/monitor" --count 500
	;;
kill) cmd_kill ;;
sync) cmd_quorum true ;;
async) cmd_quorum false ;;
wait)
	require
	ports
	wait_healthy
	;;
destroy)
	stop
	rm -rf "$DIR"
	;;
-h | --help | help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
*) die "usage: scripts/ha.sh start|stop|status|uri|failover|kill|sync|async|wait|destroy|pgbouncer|pgbouncer-uri|events (see --help)" ;;
esac
