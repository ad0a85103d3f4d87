#!/usr/bin/env bash
# The load-shedding demo: builds examples/http_gateway in Release, starts it with its shedding
# stage on (a gateway-wide token bucket of 20 tokens refilled at 20/s; reserves: normal 10 %,
# sheddable 40 %) and the rules off, replays an overload trace over real HTTP and prints the
# admitted share per priority (the X-Priority header) beside what the reserve arithmetic says.
#
#   scripts/shed_demo.sh [SECONDS]     (default 3)
#
# Trace: every 50 ms, one sheddable, one normal and one critical request, in that order (the
# worst for the critical ones): 60 requests/s for 20 tokens/s. With R(normal) = ceil(20 x 0.1)
# = 2 and R(sheddable) = ceil(20 x 0.4) = 8 tokens, and T = 20 - 2k tokens at tick k while all
# three pass: sheddable passes while T - 1 >= 8 (ticks 0..5), normal while T - 1 >= 2 (ticks
# 0..11, T falling by 1 per tick after tick 5), critical at every tick (1 per tick = the refill).
# So over 3 s (60 ticks): critical 60/60, normal 12/60, sheddable 6/60. Real time jitters the
# ticks a little, so the measured shares may differ by a request or two.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds=${1:-3}

if [[ -f scripts/deps.sh ]]; then
  bash scripts/deps.sh cmake g++ make pkg-config libyaml-cpp-dev libcpp-httplib-dev python3
fi
source scripts/gateway_start.sh
gateway_start --no-limit --shed-capacity 20 --shed-rate 20/s --shed-reserves 0.1,0.4

python3 - "$port" "$seconds" <<'EOF'
import http.client, math, sys, time

port, seconds = int(sys.argv[1]), float(sys.argv[2])
tick, order = 0.05, ["sheddable", "normal", "critical"]
ticks = int(round(seconds / tick))
capacity, reserve = 20, {"critical": 0.0, "normal": 0.1, "sheddable": 0.4}

# The reserve arithmetic on the same trace (one token per tick refilled, exact integers):
# a request of priority p passes iff T - 1 >= R(p) = ceil(capacity x reserve).
expected, tokens = {p: 0 for p in order}, capacity
for k in range(ticks):
    if k > 0:
        tokens = min(capacity, tokens + 1)
    for p in order:
        if tokens - 1 >= math.ceil(capacity * round(reserve[p] * 1e6) / 1e6):
            tokens -= 1
            expected[p] += 1

conn = http.client.HTTPConnection("127.0.0.1", port)
admitted = {p: 0 for p in order}
start = time.monotonic()
for k in range(ticks):
    delay = start + k * tick - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    for p in order:
        conn.request("GET", "/api/hello", headers={"X-Priority": p})
        r = conn.getresponse()
        r.read()
        admitted[p] += r.status == 200

print(f"\n{ticks} ticks of 50 ms, one request per priority each ({3 * ticks} requests):")
print(f"{'priority':<10} {'sent':>5} {'admitted':>9} {'share':>7}   expected (reserve arithmetic)")
for p in reversed(order):
    print(f"{p:<10} {ticks:>5} {admitted[p]:>9} {admitted[p] / ticks:>7.0%}   "
          f"{expected[p]} ({expected[p] / ticks:.0%})")
EOF
echo
curl -s "http://127.0.0.1:$port/metrics" | grep '^gateway_shed'
