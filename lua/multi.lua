-- multi.lua: one all-or-nothing decision over several keys (RedisStorage::decide_all, used by
-- rule sets), atomically: every part admits and spends its cost, or none spends anything.
--
-- Not a standalone script: the Redis storage composes the body (redis/detail/script.hpp) as
-- lua/prelude.lua, then each algorithm of the call's parts wrapped as
-- `algorithms[<wire id>] = function(KEYS, ARGV) <lua/<algorithm>.lua> end`, then this driver.
-- Each part runs its own algorithm's script unchanged, as a dry run (its peek flag set) or for
-- real; real runs of a request that ends denied are undone (DUMP/RESTORE). Redis runs the whole
-- body atomically: no other decision sees the interim.
--
-- KEYS     every part's keys, in order. Parts that share a tag share a hash tag (one slot).
-- ARGV[1]  m, the number of parts (>= 1)
-- ARGV[2]  '1': dry runs only (change nothing), '0': decide
-- then per part: its algorithm's wire id, its number of keys, '1' if its keys are cheap to save
--          (DUMP) or '0' to dry-run it first instead, its number of dry-run and of real
--          arguments, then its dry-run ARGV and its real ARGV, exactly as its own script takes
--          them.
-- Returns  { admitted (0|1), phase (0: denied, every reply reads as a dry run's; 1: admitted,
--            every reply is a real run's), reply_1, ..., reply_m }, reply_i being part i's own
--            script reply.
-- TTL      each algorithm script sets its keys' TTLs as it does alone.

local m = tonumber(ARGV[1])
local dry_only = ARGV[2] == '1'
local limits = {}
local a, k = 3, 1
for i = 1, m do
  local id, nk, save, nd, nr = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), ARGV[a + 2] == '1',
    tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  a = a + 5
  local keys, dry, real = {}, {}, {}
  for j = 1, nk do keys[j] = KEYS[k]; k = k + 1 end
  for j = 1, nd do dry[j] = ARGV[a]; a = a + 1 end
  for j = 1, nr do real[j] = ARGV[a]; a = a + 1 end
  limits[i] = { run = algorithms[id], keys = keys, save = save, dry = dry, real = real }
end

-- Undo for the real runs of a decision that ends denied: each key's DUMP and PTTL before it ran.
local function snapshot(keys)
  local saved = {}
  for j, key in ipairs(keys) do
    saved[j] = { redis.call('DUMP', key), redis.call('PTTL', key) }
  end
  return saved
end
local function restore(keys, saved)
  for j, key in ipairs(keys) do
    redis.call('DEL', key)
    local dump, ttl = saved[j][1], saved[j][2]
    if dump then redis.call('RESTORE', key, ttl > 0 and ttl or 0, dump) end
  end
end

local replies, admitted, phase = {}, true, 0
if dry_only then
  for i = 1, m do
    replies[i] = limits[i].run(limits[i].keys, limits[i].dry)
    if replies[i][1] ~= 1 then admitted = false end
  end
else
  -- 1. Limits whose keys are costly to save (a sliding log holds up to N entries) dry-run
  --    first; they are committed last (step 3), when nothing can deny any more.
  for i = 1, m do
    if not limits[i].save then
      replies[i] = limits[i].run(limits[i].keys, limits[i].dry)
      if replies[i][1] ~= 1 then admitted = false end
    end
  end
  -- 2. The others run for real, in order, each saved first (DUMP; the last one need not be: a
  --    denial changes nothing). At the first denial those already run are put back exactly as
  --    they were. Admission, the common case, so costs one run per limit and a DUMP per key.
  local saved, last_saved = {}, 0
  for i = 1, m do
    if limits[i].save then last_saved = i end
  end
  local run_so_far = {}
  for i = 1, m do
    if admitted and limits[i].save then
      if i < last_saved then saved[i] = snapshot(limits[i].keys) end
      replies[i] = limits[i].run(limits[i].keys, limits[i].real)
      if replies[i][1] ~= 1 then
        admitted = false
        for j = #run_so_far, 1, -1 do restore(limits[run_so_far[j]].keys, saved[run_so_far[j]]) end
      else
        run_so_far[#run_so_far + 1] = i
      end
    end
  end
  if admitted then
    -- 3. Commit the dry-run limits: they admitted, and nothing they depend on has moved.
    phase = 1
    for i = 1, m do
      if not limits[i].save then
        replies[i] = limits[i].run(limits[i].keys, limits[i].real)
        if replies[i][1] ~= 1 then admitted = false end
      end
    end
  else
    -- A denied request: every limit not yet asked dry-runs, for its reply. Each reply describes
    -- the state before its run, so real runs that were put back read exactly as dry runs.
    for i = 1, m do
      if replies[i] == nil then replies[i] = limits[i].run(limits[i].keys, limits[i].dry) end
    end
  end
end

local out = { admitted and 1 or 0, phase }
for i = 1, m do out[i + 2] = replies[i] end
return out
