#!/usr/bin/env bash
# A three-node RabbitMQ cluster on this machine, beside the broker on 5672
# that the other tests use (never touched here): nodes acemq1@localhost,
# acemq2@localhost and acemq3@localhost, AMQP on 127.0.0.1:5681-5683,
# management on 15681-15683, distribution on 25681-25683, data under
# /var/tmp/acemq-cluster, the Erlang cookie of the local rabbitmq user
# shared. acemq2 and acemq3 join acemq1.
#
#   scripts/cluster.sh start     start the nodes that are not running, join them, print the URLs
#   scripts/cluster.sh stop      stop every node of the three that runs
#   scripts/cluster.sh status    which nodes run, and the cluster as acemq1 sees it
#   scripts/cluster.sh clean     stop, then delete the data directories
#
# Every command can be run again: start on a running cluster only prints
# its URLs, stop on a stopped one does nothing. Erlang needs about 10 s per
# node to start on 2 cores. When none of the nodes runs, start removes what
# earlier runs left under the data directory and starts the three afresh.
set -euo pipefail

BASE=${ACEMQ_CLUSTER_DIR:-/var/tmp/acemq-cluster}
NODES=(acemq1 acemq2 acemq3)
FIRST=${NODES[0]}@localhost

port() { echo $(( $1 + ${2#acemq} )); } # port 5680 acemq2 → 5682

ctl() { # ctl NODE ARGS...: rabbitmqctl against one node of the cluster
	local node=$1
	shift
	rabbitmqctl -q -n "$node@localhost" "$@"
}

# running NODE: the node's Erlang VM answers, RabbitMQ started in it or
# not (`status` fails after stop_app, and a second VM of the same name
# would then be launched beside it).
running() { ctl "$1" ping >/dev/null 2>&1; }

# launch NODE: start the node's Erlang VM and RabbitMQ in it, detached;
# await NODE waits until it runs.
launch() {
	local n=$1 dir=$BASE/$1
	mkdir -p "$dir/mnesia" "$dir/log"
	cat >"$dir/rabbitmq.conf" <<CONF
listeners.tcp.1 = 127.0.0.1:$(port 5680 "$n")
management.tcp.ip = 127.0.0.1
management.tcp.port = $(port 15680 "$n")
loopback_users = none
CONF
	echo '[rabbitmq_management].' >"$dir/enabled_plugins"
	printf 'ERL_EPMD_ADDRESS=127.0.0.1\n' >"$dir/rabbitmq-env.conf"
	chown -R rabbitmq:rabbitmq "$dir" 2>/dev/null || true
	echo "starting $n@localhost (AMQP 127.0.0.1:$(port 5680 "$n"))"
	# Run as the rabbitmq user, whose home holds the cookie every node and
	# rabbitmqctl share.
	local run=(env HOME=/var/lib/rabbitmq
		RABBITMQ_NODENAME="$n@localhost"
		RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
		RABBITMQ_NODE_PORT="$(port 5680 "$n")"
		RABBITMQ_DIST_PORT="$(port 25680 "$n")"
		RABBITMQ_MNESIA_BASE="$dir/mnesia"
		RABBITMQ_LOG_BASE="$dir/log"
		RABBITMQ_CONFIG_FILE="$dir/rabbitmq.conf"
		RABBITMQ_ADVANCED_CONFIG_FILE="$dir/advanced.config"
		RABBITMQ_CONF_ENV_FILE="$dir/rabbitmq-env.conf"
		RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins"
		RABBITMQ_PID_FILE="$dir/pid"
		ERL_FLAGS="-kernel inet_dist_use_interface {127,0,0,1}"
		/usr/lib/rabbitmq/bin/rabbitmq-server -detached)
	if [ "$(id -u)" = 0 ]; then
		(cd /var/lib/rabbitmq && su rabbitmq -s /bin/sh -c "$(printf '%q ' "${run[@]}")")
	else
		"${run[@]}"
	fi
}

await() {
	local n=$1
	# The node registers with epmd a few seconds after -detached returns;
	# await_startup needs it registered.
	for _ in $(seq 120); do
		ctl "$n" ping >/dev/null 2>&1 && break
		sleep 1
	done
	if ! ctl "$n" await_startup --timeout 120; then
		echo "$n@localhost did not start; the end of its log ($BASE/$n/log):" >&2
		tail -n 40 "$BASE/$n/log/$n@localhost.log" >&2 2>/dev/null || ls -l "$BASE/$n/log" >&2 || true
		return 1
	fi
}

# start_app NODE: a node whose VM runs with RabbitMQ stopped in it
# (stop_app) gets RabbitMQ started again.
start_app() {
	local n=$1
	if [ "$(ctl "$n" eval 'rabbit:is_running().' 2>/dev/null)" = false ]; then
		echo "starting RabbitMQ in $n@localhost (its app was stopped)"
		ctl "$n" start_app
		await "$n"
	else
		echo "$n@localhost already runs"
	fi
}

cmd_start() {
	command -v rabbitmqctl >/dev/null || { echo "rabbitmqctl not found: run make services first" >&2; exit 1; }
	local down=() n
	for n in "${NODES[@]}"; do running "$n" || down+=("$n"); done
	if [ ${#down[@]} = ${#NODES[@]} ] && [ -d "$BASE" ]; then
		# None runs: the data left behind is only earlier tests' (each
		# makes its own vhost), and a node restarted from it waits for the
		# peers it saw last, which a crash or a reboot may have stopped in
		# any order. Start from nothing instead.
		echo "no node of the cluster runs: removing the data under $BASE and starting afresh"
		rm -rf "$BASE"
	fi
	# Every node that is down starts at once, before any is waited for: a
	# node that rejoins waits at boot for its peers to be up.
	for n in "${down[@]}"; do launch "$n"; done
	for n in "${down[@]}"; do await "$n"; done
	for n in "${NODES[@]}"; do
		[[ " ${down[*]} " == *" $n "* ]] || start_app "$n"
	done
	for n in "${NODES[@]:1}"; do
		if ctl "$n" cluster_status --formatter json | grep -q "\"$FIRST\""; then
			continue
		fi
		echo "joining $n@localhost to $FIRST"
		ctl "$n" stop_app
		ctl "$n" join_cluster "$FIRST"
		ctl "$n" start_app
		await "$n"
	done
	echo "cluster of ${#NODES[@]} nodes up:"
	for n in "${NODES[@]}"; do
		echo "  $n@localhost  amqp://guest:guest@127.0.0.1:$(port 5680 "$n")/  http://127.0.0.1:$(port 15680 "$n")/"
	done
	echo "ACEMQ_CLUSTER_AMQP_URLS=$(for n in "${NODES[@]}"; do printf 'amqp://guest:guest@127.0.0.1:%s/,' "$(port 5680 "$n")"; done | sed 's/,$//')"
}

cmd_stop() {
	# acemq1 stops last, so that it may start first next time: a node
	# waits at boot for the last one of its cluster to have stopped.
	for n in "${NODES[2]}" "${NODES[1]}" "${NODES[0]}"; do
		if running "$n"; then
			echo "stopping $n@localhost"
			ctl "$n" stop || true
		fi
	done
	echo "cluster stopped"
}

cmd_status() {
	for n in "${NODES[@]}"; do
		if ! running "$n"; then
			echo "$n@localhost stopped"
		elif [ "$(ctl "$n" eval 'rabbit:is_running().' 2>/dev/null)" = false ]; then
			echo "$n@localhost: its VM runs with RabbitMQ stopped in it (stop_app); scripts/cluster.sh start starts it"
		else
			echo "$n@localhost runs (AMQP 127.0.0.1:$(port 5680 "$n"))"
		fi
	done
	running "${NODES[0]}" && ctl "${NODES[0]}" cluster_status || true
}

case "${1:-start}" in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
clean)
	cmd_stop
	rm -rf "$BASE"
	echo "removed $BASE"
	;;
*)
	echo "usage: scripts/cluster.sh start|stop|status|clean" >&2
	exit 2
	;;
esac
