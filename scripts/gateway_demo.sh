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
