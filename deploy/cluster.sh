#!/usr/bin/env bash
# deploy/cluster.sh — run a three-node floe cluster on loopback, in the
# foreground, until Ctrl-C or SIGTERM. `make cluster` builds bin/floe first.
#
#   node   HTTP API          cluster (Raft + RPC)   data dir
#   node1  127.0.0.1:8181    127.0.0.1:8182         ./floe-cluster/node1
#   node2  127.0.0.1:8281    127.0.0.1:8282         ./floe-cluster/node2
#   node3  127.0.0.1:8381    127.0.0.1:8382         ./floe-cluster/node3
#
# All three share the warehouse file://$PWD/floe-cluster/warehouse and log to
# ./floe-cluster/nodeN.log. Each node runs with --bootstrap-expect 3 and
# --join naming all three cluster addresses: the same command line forms the
# cluster on the first start and rejoins it on every later one. Remove
# ./floe-cluster to start from scratch.
#
# Environment:
#   FLOE_CLUSTER_BASE_PORT  node N listens on BASE+100*(N-1)+1 (HTTP) and
#                           +2 (cluster); default 8180
#   FLOE_CLUSTER_DIR        data dirs, logs and warehouse; default ./floe-cluster
#   FLOE_CLUSTER_TIMEOUT    seconds to wait for a ready cluster; default 60
#   FLOE_CLUSTER_TLS_DIR    turn on mutual TLS on the cluster ports with
#                           ca.pem and nodeN.pem / nodeN-key.pem from this
#                           directory (deploy/gen-certs.sh writes them)
#   FLOE_BIN                the floe binary; default ./bin/floe
# Other FLOE_* variables (FLOE_LOG_LEVEL, FLOE_SNAPSHOT_THRESHOLD, ...) reach
# every node as usual; the flags this script passes win over them. With
# FLOE_AUTH=on, the readiness check sends FLOE_TOKEN, else
# FLOE_AUTH_ROOT_TOKEN, as the bearer token.
#
# Exit status: 0 after a stop by SIGINT/SIGTERM, 1 when the cluster did not
# come up (the failing node's log tail is printed), 2 for a bad setting.
# (bash ignores SIGINT in a script started with '&' from another script:
# stop such a run with SIGTERM.)
set -euo pipefail
# Job control puts every node in its own process group, so a Ctrl-C in the
# terminal reaches this script only; the script then stops the nodes with
# one SIGTERM each (a second signal would make floe exit at once).
set -m

bin=${FLOE_BIN:-./bin/floe}
dir=${FLOE_CLUSTER_DIR:-./floe-cluster}
base=${FLOE_CLUSTER_BASE_PORT:-8180}
timeout=${FLOE_CLUSTER_TIMEOUT:-60}
tls_dir=${FLOE_CLUSTER_TLS_DIR:-}
host=127.0.0.1
nodes=(1 2 3)
stop_timeout=20 # floe gives in-flight requests 10 s, then stops Raft

die() {
	echo "cluster.sh: $*" >&2
	exit 2
}

if ! [[ $base =~ ^[0-9]+$ ]] || ((base < 1 || base + 202 > 65535)); then
	die "FLOE_CLUSTER_BASE_PORT=$base: want a number from 1 to 65333"
fi
if ! [[ $timeout =~ ^[0-9]+$ ]] || ((timeout < 1)); then
	die "FLOE_CLUSTER_TIMEOUT=$timeout: want a positive number of seconds"
fi
[[ -x $bin ]] || die "$bin not found or not executable; run 'make build' first (or set FLOE_BIN)"
command -v curl >/dev/null || die "curl is required"

http_port() { echo $((base + 100 * ($1 - 1) + 1)); }
cluster_port() { echo $((base + 100 * ($1 - 1) + 2)); }

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
warehouse="file://$dir/warehouse"
mkdir -p "$dir/warehouse"

join=""
for n in "${nodes[@]}"; do
	join+="${join:+,}$host:$(cluster_port "$n")"
done

if [[ -n $tls_dir ]]; then
	tls_dir=$(cd "$tls_dir" && pwd) || die "FLOE_CLUSTER_TLS_DIR=$tls_dir: no such directory"
	for f in ca.pem node1.pem node1-key.pem node2.pem node2-key.pem node3.pem node3-key.pem; do
		[[ -r $tls_dir/$f ]] || die "$tls_dir/$f missing; run deploy/gen-certs.sh $tls_dir"
	done
fi

# A port already in use would make a node exit at once; say so up front.
port_busy() { (exec 3<>"/dev/tcp/$host/$1") 2>/dev/null; }
for n in "${nodes[@]}"; do
	for p in "$(http_port "$n")" "$(cluster_port "$n")"; do
		if port_busy "$p"; then
			die "$host:$p is already in use (another floe?); stop it or set FLOE_CLUSTER_BASE_PORT"
		fi
	done
done

pid=()
reported=()

alive() { kill -0 "${pid[$1]}" 2>/dev/null; }

log_tail() {
	echo "---- last lines of $dir/node$1.log ----" >&2
	tail -n 20 "$dir/node$1.log" >&2 || true
	echo "----" >&2
}

# stop_all sends each live node one SIGTERM and waits for it, bounded; a
# node still running after stop_timeout seconds is killed.
stop_all() {
	local n waited=0
	for n in "${nodes[@]}"; do
		[[ -n ${pid[$n]:-} ]] || continue
		if alive "$n"; then
			kill -TERM "${pid[$n]}" 2>/dev/null || true
		fi
	done
	for n in "${nodes[@]}"; do
		[[ -n ${pid[$n]:-} ]] || continue
		while alive "$n" && ((waited < stop_timeout * 10)); do
			sleep 0.1
			waited=$((waited + 1))
		done
		if alive "$n"; then
			echo "node$n did not stop within ${stop_timeout}s; killing it" >&2
			kill -KILL "${pid[$n]}" 2>/dev/null || true
		fi
		wait "${pid[$n]}" 2>/dev/null || true
	done
}

on_signal() {
	trap '' INT TERM
	echo
	echo "stopping the cluster..."
	stop_all
	echo "cluster stopped; data kept in $dir"
	exit 0
}
trap on_signal INT TERM
# Never leave nodes behind, whatever ends the script.
trap 'trap "" INT TERM; stop_all' EXIT

for n in "${nodes[@]}"; do
	extra=()
	if [[ -n $tls_dir ]]; then
		extra=(--tls-cert "$tls_dir/node$n.pem" --tls-key "$tls_dir/node$n-key.pem" --tls-ca "$tls_dir/ca.pem")
	fi
	args=(
		--node-id "node$n"
		--data-dir "$dir/node$n"
		--http-addr "$host:$(http_port "$n")"
		--cluster-addr "$host:$(cluster_port "$n")"
		--warehouse "$warehouse"
		--bootstrap-expect 3
		--join "$join"
		${extra[@]+"${extra[@]}"}
	)
	# The command line heads each run's log: restart a node killed by hand
	# with exactly it.
	echo "==== deploy/cluster.sh $(date -u +%Y-%m-%dT%H:%M:%SZ): $bin ${args[*]}" >>"$dir/node$n.log"
	"$bin" "${args[@]}" </dev/null >>"$dir/node$n.log" 2>&1 &
	pid[n]=$!
done
echo "started node1..node3 (pids ${pid[1]} ${pid[2]} ${pid[3]}); waiting up to ${timeout}s for a leader"

# With --auth=on the cluster status needs a token: FLOE_TOKEN, else the
# root token the nodes get (FLOE_AUTH_ROOT_TOKEN).
auth_header=()
token=${FLOE_TOKEN:-${FLOE_AUTH_ROOT_TOKEN:-}}
[[ -n $token ]] && auth_header=(-H "Authorization: Bearer $token")

# http_get prints the body of GET $1 and fails unless the status is 200.
http_get() {
	local out
	out=$(curl -s --max-time 2 ${auth_header[@]+"${auth_header[@]}"} -w '\n%{http_code}' "$1" 2>/dev/null) || return 1
	[[ ${out##*$'\n'} == 200 ]] || return 1
	printf '%s\n' "${out%$'\n'*}"
}

# json_field prints the string field $1 of the compact JSON object on stdin
# (top level fields come before "members").
json_field() { sed -n "s/^{.*\"$1\":\"\([^\"]*\)\".*/\1/p" | head -n 1; }

leader=""
deadline=$((SECONDS + timeout))
while :; do
	for n in "${nodes[@]}"; do
		if ! alive "$n"; then
			status=0
			wait "${pid[$n]}" || status=$?
			echo "node$n exited with status $status during startup" >&2
			log_tail "$n"
			exit 1 # the EXIT trap stops the others
		fi
	done
	ready=0
	leader=""
	for n in "${nodes[@]}"; do
		base_url="http://$host:$(http_port "$n")"
		http_get "$base_url/readyz" >/dev/null || continue
		status_json=$(http_get "$base_url/management/v1/cluster") || continue
		id=$(json_field leader-id <<<"$status_json")
		[[ -n $id ]] || continue
		leader=${leader:-$id}
		ready=$((ready + 1))
	done
	((ready == ${#nodes[@]})) && break
	if ((SECONDS >= deadline)); then
		echo "the cluster was not ready within ${timeout}s" >&2
		for n in "${nodes[@]}"; do
			echo "node$n /readyz: $(curl -s --max-time 2 "http://$host:$(http_port "$n")/readyz" 2>&1 || true)" >&2
			log_tail "$n"
		done
		exit 1
	fi
	sleep 0.25
done

echo
echo "floe cluster ready: 3 nodes, warehouse $warehouse${tls_dir:+, mutual TLS with certificates from $tls_dir}"
printf '  %-6s %-7s %-24s %-16s %s\n' node pid HTTP cluster log
for n in "${nodes[@]}"; do
	mark=""
	[[ node$n == "$leader" ]] && mark="  <- leader"
	printf '  %-6s %-7s %-24s %-16s %s%s\n' "node$n" "${pid[n]}" "http://$host:$(http_port "$n")" "$host:$(cluster_port "$n")" "$dir/node$n.log" "$mark"
done
leader_n=${leader#node}
if [[ $leader_n =~ ^[123]$ ]]; then
	echo "leader: $leader (http://$host:$(http_port "$leader_n"), cluster $host:$(cluster_port "$leader_n"))"
else
	echo "leader: $leader"
fi
echo "cluster status: curl -s http://$host:$(http_port 1)/management/v1/cluster"
echo "press Ctrl-C to stop all three nodes"

# Run until a signal. A node that exits now (killed by hand to try a
# failover, say) is reported once; the others keep running.
while :; do
	for n in "${nodes[@]}"; do
		if [[ -z ${reported[$n]:-} ]] && ! alive "$n"; then
			status=0
			wait "${pid[$n]}" || status=$?
			reported[n]=1
			echo "node$n (pid ${pid[$n]}) exited with status $status; the other nodes keep running" >&2
			log_tail "$n"
		fi
	done
	if ((${#reported[@]} == ${#nodes[@]})); then
		echo "all nodes exited" >&2
		exit 1
	fi
	# wait returns at once when a trapped signal arrives.
	sleep 1 &
	wait $! 2>/dev/null || true
done
