#!/usr/bin/env bash
# A throwaway Redis Cluster for tests: 3 primaries + 3 replicas on loopback, no persistence,
# its own temp dir, a short node timeout so a replica takes over within ~2-3 s of its primary
# dying.
#
#   seed=$(scripts/redis_cluster.sh start)   # prints only "127.0.0.1:PORT" once the cluster is ok
#   scripts/redis_cluster.sh stop "$seed"    # kills its 6 servers and removes its temp dir
#
# Ports: PORT..PORT+5 for clients, PORT+100..PORT+105 for the cluster bus. Logs are in
# $TMPDIR/ratelimit-cluster-PORT/<port>/redis.log while it runs.
# cluster-require-full-coverage no: while a dead primary's slots await their replica, the other
# slots keep serving (the default would refuse every key, cluster-wide).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/throwaway_daemon.sh"  # daemon_port_in_use

base="${TMPDIR:-/tmp}"
dir_of() { echo "$base/ratelimit-cluster-$1"; }

all_free() {
  local p
  for p in $(seq "$1" $(($1 + 5))) $(seq $(($1 + 100)) $(($1 + 105))); do
    daemon_port_in_use "$p" && return 1
  done
  return 0
}

start_node() {  # start_node DIR PORT
  local dir="$1/$2"
  mkdir -p "$dir"
  redis-server --port "$2" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
    --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" \
    --cluster-enabled yes --cluster-config-file "$dir/nodes.conf" --cluster-port $(($2 + 100)) \
    --cluster-node-timeout 1000 --cluster-require-full-coverage no \
    --cluster-replica-validity-factor 0 --enable-debug-command local >/dev/null 2>&1
}

wait_for() {  # wait_for TENTHS COMMAND...: polls until COMMAND succeeds
  local n="$1" i
  shift
  for i in $(seq 1 "$n"); do
    "$@" && return 0
    sleep 0.1
  done
  return 1
}

answers() { [[ "$(redis-cli -p "$1" ping 2>/dev/null)" == "PONG" ]]; }
state_ok() {
  local p
  for p in $(seq "$1" $(($1 + 5))); do
    redis-cli -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
  done
}
replicas_synced() {
  local p n=0
  for p in $(seq "$1" $(($1 + 5))); do
    if redis-cli -p "$p" info replication 2>/dev/null | grep -q '^master_link_status:up'; then
      n=$((n + 1))
    fi
  done
  [[ $n -eq 3 ]]
}

start() {
  command -v redis-server >/dev/null || { echo "redis_cluster.sh: redis-server not installed" >&2; return 1; }
  local attempt port dir p nodes
  for attempt in $(seq 1 10); do
    port=$((20000 + RANDOM % 7000))
    all_free "$port" || continue
    dir="$(dir_of "$port")"
    rm -rf "$dir" && mkdir -p "$dir"
    nodes=()
    for p in $(seq "$port" $((port + 5))); do
      start_node "$dir" "$p" || true
      nodes+=("127.0.0.1:$p")
    done
    local ok=1
    # Up to 60 s each: a machine busy with builds can take seconds to start a server.
    for p in $(seq "$port" $((port + 5))); do wait_for 600 answers "$p" || ok=0; done
    if [[ $ok -eq 1 ]] &&
        redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes \
          >"$dir/create.log" 2>&1 &&
        wait_for 300 state_ok "$port" && wait_for 300 replicas_synced "$port"; then
      echo "redis_cluster.sh: cluster on 127.0.0.1:$port..$((port + 5)) (dir $dir)" >&2
      echo "127.0.0.1:$port"
      return 0
    fi
    echo "redis_cluster.sh: the cluster on $port did not come up; logs:" >&2
    tail -3 "$dir"/*/redis.log "$dir/create.log" >&2 2>/dev/null || true
    stop "$port" || true
  done
  echo "redis_cluster.sh: could not start a cluster" >&2
  return 1
}

stop() {
  local port="${1:?usage: redis_cluster.sh stop [HOST:]PORT}" dir p pid
  port="${port##*:}"
  dir="$(dir_of "$port")"
  [[ -d "$dir" ]] || return 0
  for p in $(seq "$port" $((port + 5))); do
    [[ -s "$dir/$p/redis.pid" ]] || continue
    pid="$(cat "$dir/$p/redis.pid")"
    # Only the pid this script's server wrote, and only while it still is that server.
    if [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == redis-server* ]]; then
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
  rm -rf "$dir"
}

case "${1:-}" in
  start) start ;;
  stop) stop "${2:-}" ;;
  *) echo "usage: $0 start | stop [HOST:]PORT" >&2; exit 2 ;;
esac
