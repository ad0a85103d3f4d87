-- wrk's script for bench/run --gateways: one machine-readable line at the end, and, for the
-- half-peak runs, a pause before each request of a connection.
--
--   WRK_RATE=R WRK_CONNECTIONS=C wrk -c C -s bench/gateways_wrk.lua URL
--
-- WRK_RATE unset or 0: flat out. Otherwise each connection pauses C * 1000 / R ms (on average:
-- wrk's pause is whole milliseconds, so the script draws the floor or the ceiling in the right
-- proportion) after each answer before its next request, so the C connections together ask
-- about R requests/s, a little less by the answers' own latency (Debian's wrk 4 has no open
-- loop; the rate achieved is reported beside the one asked).
--
-- The last line: "wrk REQUESTS_PER_S P50_US P99_US NON_2XX SOCKET_ERRORS REQUESTS".

local rate = tonumber(os.getenv("WRK_RATE") or "0") or 0
local connections = tonumber(os.getenv("WRK_CONNECTIONS") or "1") or 1

if rate > 0 then
  local pause_ms = connections * 1000 / rate
  local whole = math.floor(pause_ms)
  local part = pause_ms - whole
  function delay()
    if math.random() < part then
      return whole + 1
    end
    return whole
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("wrk %.1f %.0f %.0f %d %d %d\n",
                         summary.requests / (summary.duration / 1e6),
                         latency:percentile(50), latency:percentile(99), e.status,
                         e.connect + e.read + e.write + e.timeout, summary.requests))
end
