#!/usr/bin/env bash
# Runs one public deployment of Envoy's rate limit service through the server's image: its
# environment as its manifest writes it, in a network namespace of its own with its ports and
# host names unchanged, a Redis where its environment names one, and the test's rules where its
# volume mounts the rules; then the client (client.cjs) checks /healthcheck and the decisions.
#
#   deployment.sh FILE IMAGE NODE_MODULES [ROOTFS_CACHE]
#
# ROOTFS_CACHE: where sandbox.sh keeps the image's exported files between runs.
#
# FILE (NAME.env beside this script) is the deployment, transcribed from its manifest:
#   # comment lines: where it comes from (repository, path, commit)
#   NAME=value          the container's environment, in the manifest's order
#   @service NAME IP PORT[:PORTNAME]...   a Kubernetes Service of the namespace: its
#                       service-link variables (NAME_SERVICE_HOST, NAME_PORT_6379_TCP_ADDR, ...)
#                       are set before the manifest's, as the kubelet sets them
#   @host NAME          a host name of the manifest (mapped to 127.0.0.1)
#   @redis HOST:PORT    where its Redis is (a redis-server is started there)
#   @memcached HOST:PORT  where its memcached is (a memcached is started there)
#   @rules PATH         where its volume mounts the rules: a directory, or a file (subPath)
#   @command WORDS      its `command:` (Kubernetes: replaces the image's Entrypoint)
#   @args WORDS         its `args:` (Kubernetes) or `command:` (Compose: replaces the Cmd)
#   @grpc PORT / @http PORT   its gRPC and HTTP ports (Go's defaults 8081 and 8080)
#   @metrics PORT       its Prometheus port (USE_PROMETHEUS): it must listen too
#   @xds HOST:PORT NAME its xDS management server (server/tests/xds/management_server.js, run
#                       in the namespace on PORT over TLS, presenting xds-server.crt and asking a
#                       client certificate): it pushes the test's rules as one RateLimitConfig
#                       NAME; the rules volume is then mounted empty, and the client starts once
#                       the server has ACKed them
#   @certs DIR          its TLS Secret's mount: tls.crt, tls.key (the test's peer.crt/.key,
#                       SAN DNS:envoy-ratelimit) and ca.crt (the test CA)
#   @tls NAME           the gRPC port serves TLS: the client trusts the test CA, checks the name
#                       NAME in the server's certificate and presents no client certificate
#   @volume PATH SOURCE a file of a ConfigMap, mounted with its directory at PATH: SOURCE's
#                       content (a file beside server/tests; of a .hpp, its raw string literal,
#                       the transcription the C++ tests share)
#   @pending REASON     it needs what the server does not do yet: a failure is reported as
#                       skipped (77) with REASON, and a pass fails, so the line gets removed
# The rules: domain `deployments`, `user` 2 per hour (client.cjs derives the answers).
# @xds, @certs and @tls need the test certificates (scripts/tls_certs.sh) in
# RATELIMIT_TEST_TLS_CERTS and @xds the management server's npm packages in
# RATELIMIT_TEST_XDS_NODE_MODULES (scripts/test.sh sets both): without them the run is skipped
# (77), or fails when CI=true.
set -euo pipefail
if [[ $# -lt 3 || $# -gt 4 ]]; then
  echo "usage: deployment.sh FILE IMAGE NODE_MODULES [ROOTFS_CACHE]" >&2
  exit 2
fi
file=$1
image=$2
node_modules=$3
rootfs_cache=${4:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
proto_dir=$(cd "$here/../../proto" && pwd)
name=$(basename "$file" .env)

hosts=() redis="" memcached="" rules="" command_words="" args_words="" grpc_port=8081 http_port=8080
pending="" service_env=() manifest_env=()
xds="" xds_name="" certs="" metrics_port="" tls_name="" config_volumes=()
# service_links NAME IP PORT[:PORTNAME]...: the variables the kubelet sets for a Service
# (Kubernetes pkg/kubelet/envvars): NAME upper-cased with '-' as '_'; the first port is the
# Service's port; every port gets NAME_PORT_<port>_TCP and its _PROTO, _PORT and _ADDR; a named
# port gets NAME_SERVICE_PORT_<PORTNAME>.
service_links() {
  local svc=${1^^} ip=$2 first="" p port pname
  svc=${svc//-/_}
  shift 2
  service_env+=("${svc}_SERVICE_HOST=$ip")
  for p in "$@"; do
    port=${p%%:*}
    [[ -z "$first" ]] && first=$port && service_env+=("${svc}_SERVICE_PORT=$port")
    if [[ "$p" == *:* ]]; then
      pname=${p#*:}
      pname=${pname^^}
      service_env+=("${svc}_SERVICE_PORT_${pname//-/_}=$port")
    fi
  done
  service_env+=("${svc}_PORT=tcp://$ip:$first")
  for p in "$@"; do
    port=${p%%:*}
    service_env+=("${svc}_PORT_${port}_TCP=tcp://$ip:$port" "${svc}_PORT_${port}_TCP_PROTO=tcp"
                  "${svc}_PORT_${port}_TCP_PORT=$port" "${svc}_PORT_${port}_TCP_ADDR=$ip")
  done
}

while IFS= read -r line || [[ -n "$line" ]]; do
  case "$line" in
    '' | '#'*) ;;
    '@service '*) read -r -a words <<<"${line#@service }"; service_links "${words[@]}" ;;
    '@host '*) hosts+=("${line#@host }") ;;
    '@redis '*) redis=${line#@redis } ;;
    '@memcached '*) memcached=${line#@memcached } ;;
    '@rules '*) rules=${line#@rules } ;;
    '@command '*) command_words=${line#@command } ;;
    '@args '*) args_words=${line#@args } ;;
    '@grpc '*) grpc_port=${line#@grpc } ;;
    '@http '*) http_port=${line#@http } ;;
    '@metrics '*) metrics_port=${line#@metrics } ;;
    '@pending '*) pending=${line#@pending } ;;
    '@xds '*) read -r xds xds_name <<<"${line#@xds }" ;;
    '@certs '*) certs=${line#@certs } ;;
    '@tls '*) tls_name=${line#@tls } ;;
    '@volume '*) config_volumes+=("${line#@volume }") ;;
    [A-Za-z_]*=*) manifest_env+=("$line") ;;
    *) echo "deployment.sh: $file: cannot read '$line'" >&2; exit 2 ;;
  esac
done <"$file"
[[ -n "$rules" ]] || { echo "deployment.sh: $file names no @rules path" >&2; exit 2; }
[[ -z "$xds" || ( "$xds" == *:* && -n "$xds_name" ) ]] ||
  { echo "deployment.sh: $file: @xds needs HOST:PORT NAME, not '$xds $xds_name'" >&2; exit 2; }
# missing WHAT: a test input is not there; CI must have it.
missing() {
  if [[ "${CI:-}" == true ]]; then
    echo "deployment.sh: $name: $1 (CI=true: a failure)" >&2
    exit 1
  fi
  echo "deployment.sh: $name: SKIPPED: $1"
  exit 77
}
tls_certs=${RATELIMIT_TEST_TLS_CERTS:-}
if [[ -n "$xds$certs$tls_name" ]]; then
  [[ -n "$tls_certs" && -f "$tls_certs/peer.crt" && -f "$tls_certs/xds-server.crt" ]] ||
    missing "RATELIMIT_TEST_TLS_CERTS names no scripts/tls_certs.sh folder"
fi
xds_modules=${RATELIMIT_TEST_XDS_NODE_MODULES:-}
if [[ -n "$xds" ]]; then
  [[ -n "$xds_modules" && -d "$xds_modules/@grpc/grpc-js-xds" ]] ||
    missing "RATELIMIT_TEST_XDS_NODE_MODULES names no npm packages of server/tests/xds"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-deployment.XXXXXX")
trap 'rm -rf "$work"' EXIT
printf '%s\n' "${service_env[@]}" "${manifest_env[@]}" >"$work/env"
# The rules, at the volume's path: a directory of files (a ConfigMap), or one file (subPath).
rules_yaml='domain: deployments
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 2
'
if [[ -n "$xds" ]]; then
  # The rules come over xDS only: the volume is there, and empty.
  mkdir -p "$work/rules"
  volume="$work/rules:$rules"
elif [[ "$(basename "$rules")" == *.yaml || "$(basename "$rules")" == *.yml ]]; then
  printf '%s' "$rules_yaml" >"$work/rules.yaml"
  volume="$work/rules.yaml:$rules"
else
  mkdir -p "$work/rules"
  printf '%s' "$rules_yaml" >"$work/rules/deployments.yaml"
  volume="$work/rules:$rules"
fi
extra_volumes=()
if [[ -n "$certs" ]]; then
  # Copies the container's user (65534) can read, as the Secret's files are (mode 0644).
  mkdir -m 0755 "$work/certs"
  cp "$tls_certs/peer.crt" "$work/certs/tls.crt"
  cp "$tls_certs/peer.key" "$work/certs/tls.key"
  cp "$tls_certs/ca.crt" "$work/certs/ca.crt"
  chmod 0644 "$work/certs"/*
  extra_volumes+=("$work/certs:$certs")
fi
for v in "${config_volumes[@]}"; do
  read -r target source <<<"$v"
  source="$here/../$source"
  [[ -f "$source" ]] || { echo "deployment.sh: $file: no file '$source' for @volume" >&2; exit 2; }
  dir="$work/volume.${#extra_volumes[@]}"
  mkdir -m 0755 "$dir"
  if [[ "$source" == *.hpp ]]; then
    # The raw string literal: from the line with R"( to the line ending )";
    awk 'done { next } !on && /R"\(/ { sub(/.*R"\(/, ""); on = 1 }
         on && /^\)";/ { done = 1; next } on { print }' "$source" >"$dir/$(basename "$target")"
  else
    cp "$source" "$dir/$(basename "$target")"
  fi
  [[ -s "$dir/$(basename "$target")" ]] ||
    { echo "deployment.sh: $file: '$source' is empty" >&2; exit 2; }
  chmod 0644 "$dir/$(basename "$target")"
  extra_volumes+=("$dir:$(dirname "$target")")
done

# As Envoy Gateway runs it (runAsUser 65534, besides the read-only root and no capabilities
# that sandbox.sh always applies).
sandbox=(--image "$image" --env-file "$work/env" --volume "$volume" --user 65534:65534)
[[ -n "$command_words" ]] && sandbox+=(--command "$command_words")
[[ -n "$args_words" ]] && sandbox+=(--args "$args_words")
[[ -n "$rootfs_cache" ]] && sandbox+=(--rootfs-cache "$rootfs_cache")
for h in "${hosts[@]}"; do sandbox+=(--host "$h"); done
for v in "${extra_volumes[@]}"; do sandbox+=(--volume "$v"); done
if [[ -n "$redis" ]]; then
  command -v redis-server >/dev/null || { echo "deployment.sh: redis-server is not installed" >&2; exit 1; }
  sandbox+=(--service "exec redis-server --port ${redis##*:} --bind 127.0.0.1 --save '' --appendonly no")
fi
if [[ -n "$memcached" ]]; then
  command -v memcached >/dev/null || { echo "deployment.sh: memcached is not installed" >&2; exit 1; }
  sandbox+=(--service "exec memcached -l 127.0.0.1 -p ${memcached##*:} -U 0 -u nobody")
fi
ready="exec 3<>/dev/tcp/127.0.0.1/$grpc_port 4<>/dev/tcp/127.0.0.1/$http_port"
[[ -n "$metrics_port" ]] && ready+=" 5<>/dev/tcp/127.0.0.1/$metrics_port"
if [[ -n "$xds" ]]; then
  # The test's rules as one RateLimitConfig, version 1 of the snapshot.
  cat >"$work/snapshot.json" <<SNAPSHOT
{"push": {"version": "1", "resources": [{"name": "$xds_name", "domain": "deployments",
  "descriptors": [{"key": "user", "rate_limit": {"unit": "HOUR", "requests_per_unit": 2}}]}]}}
SNAPSHOT
  : >"$work/xds.log"
  printf -v xds_command \
    'NODE_PATH=%q exec node %q %q %q --server-cert xds-server --snapshot %q >%q 2>&1' \
    "$xds_modules" "$here/../xds/management_server.js" "${xds##*:}" "$tls_certs" \
    "$work/snapshot.json" "$work/xds.log"
  sandbox+=(--service "$xds_command")
  # Ready also once the server has ACKed version 1 (a request: version "1", no error_detail).
  ready+=" && awk -F '\t' '\$1 == \"request\" && \$3 == \"1\" && \$5 == \"0\" { ok = 1 }"
  ready+=" END { exit !ok }' '$work/xds.log'"
fi
# Ready once both ports listen; the client then checks what they answer.
sandbox+=(--ready "$ready")

client=(node "$here/client.cjs" --proto "$proto_dir" --grpc "127.0.0.1:$grpc_port"
        --http "127.0.0.1:$http_port" --domain deployments --key user --limit 2 --unit hour)
[[ -n "$tls_name" ]] && client+=(--tls-ca "$tls_certs/ca.crt" --tls-name "$tls_name")
if [[ -n "$redis" ]]; then
  # The counts are in the deployment's Redis, not in the process: it holds the window's key.
  client=(bash -c '"$@" && keys=$(redis-cli -p '"${redis##*:}"' --raw dbsize) &&
          echo "redis at '"$redis"': $keys key(s)" && [[ $keys -gt 0 ]]' client "${client[@]}")
fi

echo "deployment $name: ${#manifest_env[@]} variables of the manifest, ${#service_env[@]} service links"
status=0
NODE_PATH="$node_modules" bash "$here/sandbox.sh" "${sandbox[@]}" -- "${client[@]}" || status=$?
if [[ -n "$xds" && $status -ne 0 ]]; then
  echo "--- the xDS management server"
  tail -n 20 "$work/xds.log"
fi
if [[ -n "$pending" ]]; then
  if [[ $status -eq 0 ]]; then
    echo "deployment $name: passes, but is marked @pending ($pending): remove that line" >&2
    exit 1
  fi
  echo "deployment $name: PENDING: $pending"
  exit 77
fi
[[ $status -eq 0 ]] && echo "deployment $name: PASS" || echo "deployment $name: FAIL"
exit "$status"
