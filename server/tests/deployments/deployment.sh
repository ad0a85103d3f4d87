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
#   @pending REASON     it needs what the server does not do yet: a failure is reported as
#                       skipped (77) with REASON, and a pass fails, so the line gets removed
# The rules: domain `deployments`, `user` 2 per hour (client.cjs derives the answers).
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
    '@pending '*) pending=${line#@pending } ;;
    [A-Za-z_]*=*) manifest_env+=("$line") ;;
    *) echo "deployment.sh: $file: cannot read '$line'" >&2; exit 2 ;;
  esac
done <"$file"
[[ -n "$rules" ]] || { echo "deployment.sh: $file names no @rules path" >&2; exit 2; }

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
if [[ "$(basename "$rules")" == *.yaml || "$(basename "$rules")" == *.yml ]]; then
  printf '%s' "$rules_yaml" >"$work/rules.yaml"
  volume="$work/rules.yaml:$rules"
else
  mkdir -p "$work/rules"
  printf '%s' "$rules_yaml" >"$work/rules/deployments.yaml"
  volume="$work/rules:$rules"
fi

# As Envoy Gateway runs it (runAsUser 65534, besides the read-only root and no capabilities
# that sandbox.sh always applies).
sandbox=(--image "$image" --env-file "$work/env" --volume "$volume" --user 65534:65534)
[[ -n "$command_words" ]] && sandbox+=(--command "$command_words")
[[ -n "$args_words" ]] && sandbox+=(--args "$args_words")
[[ -n "$rootfs_cache" ]] && sandbox+=(--rootfs-cache "$rootfs_cache")
for h in "${hosts[@]}"; do sandbox+=(--host "$h"); done
if [[ -n "$redis" ]]; then
  command -v redis-server >/dev/null || { echo "deployment.sh: redis-server is not installed" >&2; exit 1; }
  sandbox+=(--service "exec redis-server --port ${redis##*:} --bind 127.0.0.1 --save '' --appendonly no")
fi
if [[ -n "$memcached" ]]; then
  command -v memcached >/dev/null || { echo "deployment.sh: memcached is not installed" >&2; exit 1; }
  sandbox+=(--service "exec memcached -l 127.0.0.1 -p ${memcached##*:} -U 0 -u nobody")
fi
# Ready once both ports listen; the client then checks what they answer.
sandbox+=(--ready "exec 3<>/dev/tcp/127.0.0.1/$grpc_port 4<>/dev/tcp/127.0.0.1/$http_port")

client=(node "$here/client.cjs" --proto "$proto_dir" --grpc "127.0.0.1:$grpc_port"
        --http "127.0.0.1:$http_port" --domain deployments --key user --limit 2 --unit hour)
if [[ -n "$redis" ]]; then
  # The counts are in the deployment's Redis, not in the process: it holds the window's key.
  client=(bash -c '"$@" && keys=$(redis-cli -p '"${redis##*:}"' --raw dbsize) &&
          echo "redis at '"$redis"': $keys key(s)" && [[ $keys -gt 0 ]]' client "${client[@]}")
fi

echo "deployment $name: ${#manifest_env[@]} variables of the manifest, ${#service_env[@]} service links"
status=0
NODE_PATH="$node_modules" bash "$here/sandbox.sh" "${sandbox[@]}" -- "${client[@]}" || status=$?
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
