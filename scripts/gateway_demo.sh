#!/usr/bin/env bash
# The gateway demo: installs what is missing, builds examples/http_gateway in Release, starts it
# on a free loopback port with the in-process storage, examples/http_gateway/rules.yaml and the
# API keys of examples/http_gateway/keys.txt, sends it real HTTP requests with curl, prints what
# came back, and stops it.
#
#   scripts/gateway_demo.sh
#
# Traffic: a burst of 120 requests from one API key (free plan: 100 per minute), 8 login attempts
# from another key (login: 5 per minute), 5 requests with made-up keys (unknown keys count as
# anonymous, limited by IP, and get 401), and 25 requests from an anonymous client (20 per minute
# per IP, 5 already spent). Expect 100/20 and 5/3 answers 200/429, 5 x 401, then 15/10 200/429
# (a burst that straddles a minute boundary may get a request or two more: the sliding window
# counter's estimate).
#
# Then, when NGINX is installed, the same idea behind real NGINX: ratelimit_server's forward-auth
# check with docs/gateways/nginx/ratelimit.conf, 8 requests against 5 per minute per client
# address: expect 5 x 200 and 3 x 429 (more if the burst straddles a minute: a fixed window).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Only what the in-process demo needs (the gateway group also brings Redis and wrk).
if [[ -f scripts/deps.sh ]]; then
  bash scripts/deps.sh cmake g++ make pkg-config libyaml-cpp-dev libcpp-httplib-dev curl
fi
source scripts/gateway_start.sh
gateway_start
base="http://127.0.0.1:$port"

# burst N CURL-ARGS...: sends N requests and prints how many got each status.
burst() {
  local n=$1
  shift
  for _ in $(seq "$n"); do curl -s -o /dev/null -w '%{http_code}\n' "$@"; done | sort | uniq -c |
    awk '{ printf "    %s x %s\n", $2, $1 }'
}
# sample CURL-ARGS...: one more request, printing its status line, rate limit headers and body.
sample() {
  curl -s -i "$@" | tr -d '\r' |
    grep -iE '^(HTTP/|ratelimit|x-ratelimit|retry-after|\{)' | sed 's/^/    /'
}

echo
echo "1) burst of 120 GET /api/items with X-API-Key: demo-free-key (free plan: 100/minute)"
burst 120 -H 'X-API-Key: demo-free-key' "$base/api/items"
echo "  the next one:"
sample -H 'X-API-Key: demo-free-key' "$base/api/items"

echo
echo "2) 8 POST /login with X-API-Key: demo-login-key (login: 5/minute, on top of the plan)"
burst 8 -X POST -d '{"user": "alice"}' -H 'X-API-Key: demo-login-key' "$base/login"
echo "  the next one:"
sample -X POST -d '{"user": "alice"}' -H 'X-API-Key: demo-login-key' "$base/login"
echo "  but the same key may still use the API (the denied logins spent nothing of its plan):"
sample -H 'X-API-Key: demo-login-key' "$base/api/hello"

echo
echo "3) 5 GET /api/hello with made-up keys (unknown keys count as anonymous, by IP, then get 401)"
for i in 1 2 3 4 5; do curl -s -o /dev/null -w '%{http_code}\n' -H "X-API-Key: made-up-$i" "$base/api/hello"; done |
  sort | uniq -c | awk '{ printf "    %s x %s\n", $2, $1 }'

echo
echo "4) 25 GET /api/hello with no API key (anonymous, by IP: 20/minute, 5 spent by the made-up keys)"
burst 25 "$base/api/hello"

echo
echo "5) GET /metrics"
curl -s "$base/metrics" | grep -v '^#' | grep -vE ' 0(\.0+)?$' | sed 's/^/    /'

# --- the second path: real NGINX in front, asking ratelimit_server's forward-auth check ----------
# Only when NGINX is installed (Debian: nginx-light) and the server builds here (its packages:
# bash scripts/deps.sh test). NGINX runs docs/gateways/nginx/ratelimit.conf unchanged, from its
# own prefix in a temp dir; the application behind it is the server's own /healthcheck.
nginx_bin=$(command -v nginx || { [[ -x /usr/sbin/nginx ]] && echo /usr/sbin/nginx; } || true)
if [[ -z "$nginx_bin" ]]; then
  echo
  echo "6) skipped: NGINX is not installed (Debian: nginx-light) for the forward-auth demo"
  exit 0
fi
echo
echo "building ratelimit_server for the NGINX demo (a few minutes the first time)"
if ! cmake --build build/gateway -j2 --target ratelimit_server >/dev/null 2>&1; then
  echo
  echo "6) skipped: ratelimit_server does not build here (bash scripts/deps.sh test)"
  exit 0
fi
demo_dir=$(mktemp -d)
server_pid="" nginx_pid=""
nginx_demo_stop() {
  [[ -n "$nginx_pid" ]] && kill -TERM "$nginx_pid" 2>/dev/null && wait "$nginx_pid" || true
  [[ -n "$server_pid" ]] && kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid" || true
  rm -rf "$demo_dir"
  gateway_stop
}
trap nginx_demo_stop EXIT
mkdir -p "$demo_dir/rules/config" "$demo_dir/nginx/ratelimit" "$demo_dir/nginx/tmp"
cat >"$demo_dir/rules/config/edge.yaml" <<'YAML'
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 5}
YAML
cat >"$demo_dir/actions.yaml" <<'YAML'
domains:
  - domain: edge
    rate_limits:
      - actions:
          - remote_address: {}
YAML
RUNTIME_ROOT="$demo_dir/rules" HOST=127.0.0.1 PORT=0 GRPC_HOST=127.0.0.1 GRPC_PORT=0 \
  RATELIMIT_SERVER_STORAGE=memory RATELIMIT_SERVER_CHECK_ACTIONS="$demo_dir/actions.yaml" \
  RATELIMIT_SERVER_TRUSTED_PROXIES=127.0.0.1 \
  build/gateway/server/ratelimit_server >"$demo_dir/server.log" 2>&1 &
server_pid=$!
check_port=""
for _ in $(seq 100); do  # up to 10 s for the server to start listening
  check_port=$(sed -n 's|.*HTTP on 127\.0\.0\.1:\([0-9]*\).*|\1|p' "$demo_dir/server.log")
  [[ -n "$check_port" ]] && break
  sleep 0.1
done
[[ -n "$check_port" ]] || { echo "ratelimit_server did not start" >&2; cat "$demo_dir/server.log" >&2; exit 1; }
# A free port for NGINX: bind one, release it.
nginx_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 18480)
echo "server 127.0.0.1:$check_port;" >"$demo_dir/nginx/ratelimit/check.addr"
echo "server 127.0.0.1:$check_port;" >"$demo_dir/nginx/ratelimit/app.addr"
echo "listen 127.0.0.1:$nginx_port;" >"$demo_dir/nginx/ratelimit/listen.addr"
p="$demo_dir/nginx"
{
  echo "daemon off; worker_processes 1; pid $p/nginx.pid; error_log stderr;"
  [[ $(id -u) -eq 0 ]] && echo "user root;"
  echo "events { worker_connections 256; }"
  echo "http { access_log off; client_body_temp_path $p/tmp/body; proxy_temp_path $p/tmp/proxy;"
  echo "  fastcgi_temp_path $p/tmp/fastcgi; uwsgi_temp_path $p/tmp/uwsgi; scgi_temp_path $p/tmp/scgi;"
  echo "  include $PWD/docs/gateways/nginx/ratelimit.conf; }"
} >"$p/nginx.conf"
"$nginx_bin" -p "$p" -c "$p/nginx.conf" -e stderr >"$p/nginx.log" 2>&1 &
nginx_pid=$!
for _ in $(seq 100); do  # a TCP connect only: a request would spend one of the limit's 5
  (exec 3<>"/dev/tcp/127.0.0.1/$nginx_port") 2>/dev/null && break
  sleep 0.1
done

echo
echo "6) real NGINX ($nginx_bin) in front, asking ratelimit_server's /check/edge"
echo "   (docs/gateways/nginx/ratelimit.conf; 5 per minute per client address): 8 GET /healthcheck"
burst 8 "http://127.0.0.1:$nginx_port/healthcheck"
echo "  the next one:"
sample "http://127.0.0.1:$nginx_port/healthcheck"
