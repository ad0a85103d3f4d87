#pragma once
/// @file regional_exchange.hpp
/// GENERATED from regional_exchange.lua by cmake/embed_lua.cmake: edit the .lua file, then run
///   cmake -DLUA_DIR=lua -DOUTPUT_DIR=include/ratelimit/lua -P cmake/embed_lua.cmake
/// (a CTest test fails while this file is out of date). Thread safety: constant.

#include <string_view>

namespace ratelimit::lua {

/// The text of regional_exchange.lua.
inline constexpr std::string_view regional_exchange = R"lua(-- regional_exchange.lua: the steps of one exchange between regions (redis/regional/storage.hpp;
-- the hash layout is in lua/regional_window.lua). Five modes, by ARGV[1]:
--
-- claim    on this region's Redis. KEYS: the dirty set. ARGV: 'claim' | self | at most this
--          many hashes | m | m region names | now, ms | expiry, ms | hold, ms (optional, 0:
--          none; the buckets' sets give one). For each hash of the set
--          (SRANDMEMBER: a bounded sample), d_r = n:<self> - c:<r> for each region r, and
--          c:<r> += d_r: the units this round pushes to r (another exchanger of this region
--          claims only what is left). t:<r> = now (ms) only when no earlier claim is
--          outstanding (c:<r> = s:<r> before it): the time of the oldest claim neither
--          acknowledged nor undone. One older than `expiry` (longer than a round can last)
--          was lost with its round (a reply that timed out after the script ran): everything
--          outstanding is claimed again (c:<r> = s:<r> first), so those units are pushed after
--          all (a round still under way pushes some twice: only more debits; s:<r> never
--          exceeds c:<r>, see add). Were every new claim to restamp, a lost one would never
--          look old while the key has traffic, and its units would stay unseen for good. A
--          hash that expired, or that every region has acknowledged whole, leaves the set. A
--          hash some region has not acknowledged whole is kept at least `hold` more (and the
--          set with it): a bucket's unseen units must not be forgotten while a partition lasts.
--          Returns { hash, its PTTL (ms), d_1, ..., d_m, ... } for the hashes with a d_r > 0,
--          then, when ARGV[8 + m] is '1' (a set of one Redis Cluster slot, of which the
--          exchange claims those still non-empty again), the set's size after the claim.
-- add      on this region's Redis. KEYS: a hash. ARGV: 'add' | field | d | s:<r> | c:<r>.
--          HINCRBY field d if the hash still exists (an acknowledgement: s:<r> += d; an undone
--          claim after a failed push: c:<r> -= d), then s:<r> = min(s:<r>, c:<r>): a claim
--          taken again after it expired while its first round was still under way is pushed
--          twice and acknowledged twice, and s:<r> must never count more units than were
--          claimed (a phantom acknowledgement would let this region admit more than U units
--          that region r never debits). Returns 1, or 0 when the hash had expired.
-- push     on another region's Redis. KEYS: the same hash name. ARGV: 'push' | field n:<self>
--          | d | TTL ms | (optional, buckets) extra ms | hold ms | claim time, us | one
--          unit, ns rounded up. HINCRBY field d (counts merge by
--          addition; never a written total) and keeps the longer of the hash's TTL and the
--          given one. A bucket's hash also lives `extra` (what d units take to refill) beyond
--          the longer of its TTL and `hold` (the exchange's lag): the debt those units add
--          outlasts the hash's state, and a hash that had expired lives until its bucket,
--          debited, is full again (redis/regional/bucket.hpp). A bucket's push also debits
--          the d units at once, dated at the claim (they were all admitted before it), as
--          lua/regional_bucket.lua's state: at <- max(at, claim) + d x unit (rounded up to whole
--          us, remainder untouched: more backlog, never more tokens), and x += d, so a decision
--          does not debit them again. A region that was idle thus sees the others' units with
--          the refill since they were spent, not all at once against its present.
--          Returns the field's new value. With KEYS[2] (the exclusion hash, below), a push from
--          a region that some region holding an exclusion here excludes is refused ('FENCED'
--          error, nothing written): while it is excluded, its acknowledgements from here stay
--          as they were, so its unseen units stay bounded by what this region has seen.
-- grant    on any region's Redis. KEYS: the exclusion hash. ARGV: 'grant' | i | j | lease, ms |
--          instance (the asking process's id). Fields '<i>><j>><instance>' = the instant (this
--          Redis's TIME, ms) until which that instance of region i may exclude region j (leave
--          it out of the minimum of its unseen bound); an instant not after now is no
--          exclusion. Grants it for `lease` more unless it would make a cycle of two: refused
--          (returns 0) while j excludes i, i is excluded by anyone, or j excludes anyone
--          (redis/regional/exchange.hpp: no two regions exclude each other, and an excluded
--          region excludes no one). Returns 1 when granted.
-- release  KEYS: the exclusion hash. ARGV: 'release' | i | j | instance. Ends that instance's
--          exclusion of j here (another instance of i keeps its own). Returns 1.
-- Fields are written with HINCRBY of the difference and lapse by their value, not deleted.

local mode = ARGV[1]
local TWO53 = 9007199254740992

-- This Redis's time in ms (exclusions are timed by the Redis that holds them).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The exclusions in effect in hash `key`: a list of { excluder, excluded, field, until }.
local function exclusions(key, now)
  local out, flat = {}, redis.call('HGETALL', key)
  for k = 1, #flat, 2 do
    local till = tonumber(flat[k + 1])
    if till > now then
      local a, b = string.match(flat[k], '^([^>]*)>([^>]*)>')
      if a then out[#out + 1] = { a, b, flat[k], till } end
    end
  end
  return out
end

if mode == 'claim' then
  local self, m = ARGV[2], tonumber(ARGV[4])
  local now, expiry = tonumber(ARGV[5 + m]), tonumber(ARGV[6 + m])
  local hold = tonumber(ARGV[7 + m] or '0')
  local out = {}
  for _, h in ipairs(redis.call('SRANDMEMBER', KEYS[1], tonumber(ARGV[3]))) do
    local ttl = redis.call('PTTL', h)
    if ttl < 0 then
      redis.call('SREM', KEYS[1], h)
    else
      local mine = tonumber(redis.call('HGET', h, 'n:' .. self) or '0')
      local deltas, any, done = {}, false, true
      for i = 1, m do
        local r = ARGV[4 + i]
        local c = tonumber(redis.call('HGET', h, 'c:' .. r) or '0')
        local s = tonumber(redis.call('HGET', h, 's:' .. r) or '0')
        local stamp = tonumber(redis.call('HGET', h, 't:' .. r) or '0')
        if c > s and now - stamp > expiry then
          redis.call('HINCRBY', h, 'c:' .. r, s - c)  -- a lost claim: its units were never pushed
          c = s
        end
        local d = mine - c
        if d > 0 then
          redis.call('HINCRBY', h, 'c:' .. r, d)
          if c <= s then  -- the oldest outstanding claim (HINCRBY: no other command needed)
            redis.call('HINCRBY', h, 't:' .. r, now - stamp)
          end
          any = true
        else
          d = 0
        end
        deltas[i] = d
        if s < mine then done = false end
      end
      if not done and hold > 0 and ttl < hold then
        redis.call('PEXPIRE', h, hold)
        ttl = hold
        if redis.call('PTTL', KEYS[1]) < hold then redis.call('PEXPIRE', KEYS[1], hold) end
      end
      if any then
        out[#out + 1] = h
        out[#out + 1] = ttl
        for i = 1, m do out[#out + 1] = deltas[i] end
      elseif done then
        redis.call('SREM', KEYS[1], h)
      end
    end
  end
  if ARGV[8 + m] == '1' then out[#out + 1] = redis.call('SCARD', KEYS[1]) end
  return out
elseif mode == 'add' then
  if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
  redis.call('HINCRBY', KEYS[1], ARGV[2], ARGV[3])
  if ARGV[5] then
    local s = tonumber(redis.call('HGET', KEYS[1], ARGV[4]) or '0')
    local c = tonumber(redis.call('HGET', KEYS[1], ARGV[5]) or '0')
    if s > c then redis.call('HINCRBY', KEYS[1], ARGV[4], c - s) end
  end
  return 1
elseif mode == 'push' then
  if KEYS[2] then
    local from = string.sub(ARGV[2], 3)
    for _, e in ipairs(exclusions(KEYS[2], now_ms())) do
      if e[2] == from then
        return redis.error_reply('FENCED region ' .. from .. ' is excluded by region ' .. e[1])
      end
    end
  end
  local ttl, extra, hold = tonumber(ARGV[4]), tonumber(ARGV[5] or '0'), tonumber(ARGV[6] or '0')
  if extra > 0 then
    local base = redis.call('PTTL', KEYS[1])
    if base < hold then base = hold end
    if base + extra > ttl then ttl = base + extra end
  end
  local v = redis.call('HINCRBY', KEYS[1], ARGV[2], ARGV[3])
  if ARGV[8] then
    local d, claim, unit = tonumber(ARGV[3]), tonumber(ARGV[7]), tonumber(ARGV[8])
    local at = tonumber(redis.call('HGET', KEYS[1], 'a') or '0')
    local rem = tonumber(redis.call('HGET', KEYS[1], 'r') or '0')
    local from = at
    if at < claim or (at == claim and rem == 0) then from = claim end
    -- d x unit ns in whole us, rounded up (one us more where the product is not exact).
    local p = d * unit
    local add = math.floor(p / 1000)
    if add * 1000 < p or p >= TWO53 then add = add + 1 end
    redis.call('HINCRBY', KEYS[1], 'a', from + add - at)
    redis.call('HINCRBY', KEYS[1], 'x', d)
  end
  if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
  return v
elseif mode == 'grant' then
  local i, j, lease = ARGV[2], ARGV[3], tonumber(ARGV[4])
  local now = now_ms()
  for _, e in ipairs(exclusions(KEYS[1], now)) do
    if e[2] == i or e[1] == j then return 0 end
  end
  local field = i .. '>' .. j .. '>' .. ARGV[5]
  local was = tonumber(redis.call('HGET', KEYS[1], field) or '0')
  redis.call('HINCRBY', KEYS[1], field, now + lease - was)
  -- The hash outlives every exclusion it holds (each ends at most `lease` from now).
  if redis.call('PTTL', KEYS[1]) < lease then redis.call('PEXPIRE', KEYS[1], lease) end
  return 1
elseif mode == 'release' then
  local field = ARGV[2] .. '>' .. ARGV[3] .. '>' .. ARGV[4]
  local was = tonumber(redis.call('HGET', KEYS[1], field) or '0')
  if was ~= 0 then redis.call('HINCRBY', KEYS[1], field, -was) end
  return 1
end
return redis.error_reply('regional_exchange.lua: unknown mode ' .. tostring(mode))
)lua";

}  // namespace ratelimit::lua
