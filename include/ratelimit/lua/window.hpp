#pragma once
/// @file window.hpp
/// GENERATED from window.lua by cmake/embed_lua.cmake: edit the .lua file, then run
///   cmake -DLUA_DIR=lua -DOUTPUT_DIR=include/ratelimit/lua -P cmake/embed_lua.cmake
/// (a CTest test fails while this file is out of date). Thread safety: constant.

#include <string_view>

namespace ratelimit::lua {

/// The text of window.lua.
inline constexpr std::string_view window = R"lua(-- window.lua: one fixed window or sliding window counter decision (the twins of
-- FixedWindowModel and SlidingCounterModel).
--
-- Windows k = floor(t / W), aligned to the clock's epoch; c counts window k (0 if the key last
-- counted in an earlier window), p counted window k - 1 (0 unless the key counted there).
-- Fixed window: admit n iff c + n <= N. Sliding counter: with e = t - kW, the estimate
-- c + p (W - e) / W; admit n iff (c + n) W + p (W - e) <= N W, i.e. with s = N - c - n >= 0,
-- p (W - e) <= s W. Then c <- c + n.
-- Exact in doubles: W is whole us (the client checks), so t, k, e and W are whole us below 2^53;
-- the products p (W - e) and s W (up to 10^9 x 3.2 x 10^13) are compared as two limbs.
--
-- KEY      string, struct '<ddd': last (latest admitted time, us: its window is the counted
--          one; a request stamped earlier is decided then), cur (count of last's window), prev
--          (count of the window before it; 0 for a fixed window)
-- ARGV     now_us ('' = Redis TIME) | W, us | n (at most N + 1; 2N for a refund or a
--          penalty) | N | mode: '0' a take, '1' a peek (changes nothing), 'r<t0_us>' a refund
--          of a take at t0, 'p' a penalty | TTL margin ms | 's' for a sliding counter, 'f' for
--          a fixed window
-- Refund (always applied, reply admitted 1): with k0 = floor(min(t0, t) / W), c <- c - min(n, c)
-- if k0 = k, p <- p - min(n, p) if k0 = k - 1 (sliding counter); nothing for an earlier
-- window. Penalty: c <- min(c + n, 2N) if c < 2N. The client runs the same step in C++ on the reply.
-- Returns  { admitted (0|1), decision time (us), c, p } as seen from window k, before the
--          decision: the client derives remaining, retry_after and reset_after with the model.
-- TTL      until the counts no longer matter: the end of window k (fixed), of k + 1 (sliding).

local LIMB = 4194304  -- 2^22

-- floor(a / b) for whole a, b >= 1 below 2^53, exact: the float quotient is within one.
local function floor_div(a, b)
  local q = math.floor(a / b)
  if q * b > a then return q - 1 end
  if (q + 1) * b <= a then return q + 1 end
  return q
end

-- a x w as two limbs (hi, lo), a x w = hi x 2^22 + lo, for a < 2^30 and w < 2^45: every partial
-- product stays below 2^53.
local function mul(a, w)
  local w_hi = math.floor(w / LIMB)
  local low = a * (w - w_hi * LIMB)
  local carry = math.floor(low / LIMB)
  return a * w_hi + carry, low - carry * LIMB
end

local function decide(key, A, o)
  local last, cur, prev = load_state(key, '<ddd', 24)
  local t = now_us(A[o + 1])
  if last and last > t then t = last end
  local w = tonumber(A[o + 2])
  local sliding = A[o + 7] == 's'
  local k = floor_div(t, w)
  local c, p = 0, 0
  if last then
    local k_last = floor_div(last, w)
    if k == k_last then
      c, p = cur, prev
    elseif k == k_last + 1 and sliding then
      p = cur
    end
  end
  local mode = A[o + 5]
  if mode ~= '0' and mode ~= '1' then
    local n, c2, p2 = tonumber(A[o + 3]), c, p
    if mode == 'p' then
      local most = 2 * tonumber(A[o + 4])
      if c < most then c2 = math.min(c + n, most) end
    else
      local t0 = tonumber(string.sub(mode, 2))
      local k0 = floor_div(t0 < t and t0 or t, w)
      if k0 == k then
        c2 = math.max(c - n, 0)
      elseif k0 == k - 1 and sliding then
        p2 = math.max(p - n, 0)
      end
    end
    local r = { 1, t, c, p }
    r.k, r.c2, r.p2 = k, c2, p2
    return r, c2 ~= c or p2 ~= p
  end
  local s = tonumber(A[o + 4]) - c - tonumber(A[o + 3])
  local admitted = s >= 0
  if admitted and sliding and p > s then
    local l_hi, l_lo = mul(p, w - (t - k * w))
    local r_hi, r_lo = mul(s, w)
    admitted = l_hi < r_hi or (l_hi == r_hi and l_lo <= r_lo)
  end
  local r = { admitted and 1 or 0, t, c, p }
  r.k = k  -- for write; not part of the reply (only the array part is returned)
  return r, admitted and mode ~= '1'
end

-- The admitted request's write, from decide's reply r: c <- c + n (or a refund's or a
-- penalty's counts).
local function write(key, A, o, r)
  local t, w = r[2], tonumber(A[o + 2])
  local matters = (r.k + (A[o + 7] == 's' and 2 or 1)) * w - t
  local c, p = r.c2, r.p2
  if not c then c, p = r[3] + tonumber(A[o + 3]), r[4] end
  redis.call('SET', key, struct.pack('<ddd', t, c, p), 'PX', ttl_ms(matters, tonumber(A[o + 6])))
end

return decide, write
)lua";

}  // namespace ratelimit::lua
