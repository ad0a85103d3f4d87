-- rules.lua: one rule-set decision (include/ratelimit/rules_redis.hpp), atomically: every limit
-- that matches the request admits it and spends its cost, or none spends anything.
--
-- Not a standalone script: rules_redis.hpp builds the body as lua/prelude.lua, then each
-- algorithm script (lua/<algorithm>.lua) wrapped as `local function algo_<algorithm>(KEYS,
-- ARGV) ... end`, then this driver. Each limit runs its own algorithm's script unchanged, first
-- as a dry run (its peek flag set) and then, only if every limit admits, for real: Redis runs
-- the whole body atomically, so nothing can move a counter between the two passes.
--
-- KEYS     every limit's keys, in order. A per-client limit's keys carry the client's hash tag;
--          a shared limit's keys carry their own.
-- ARGV[1]  m, the number of limits (>= 1)
-- ARGV[2]  '1': dry runs only (change nothing), '0': decide
-- then per limit: the algorithm (1 token_bucket, 2 leaky_bucket, 3 fixed_window, 4 sliding_log,
--          5 sliding_counter), its number of keys, of dry-run arguments and of real arguments,
--          then its dry-run ARGV and its real ARGV, exactly as its own script takes them.
-- Returns  { admitted (0|1), phase (0: the replies are dry runs', or a real run's that denied
--            and so changed nothing; 1: every reply is a real run's), reply_1, ..., reply_m },
--            reply_i being limit i's own script reply.
-- TTL      each algorithm script sets its keys' TTLs as it does alone.

local algorithms = {
  algo_token_bucket, algo_leaky_bucket, algo_fixed_window, algo_sliding_log, algo_sliding_counter,
}
local m = tonumber(ARGV[1])
local dry_only = ARGV[2] == '1'
local limits = {}
local a, k = 3, 1
for i = 1, m do
  local id, nk, nd, nr = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]),
    tonumber(ARGV[a + 3])
  a = a + 4
  local keys, dry, real = {}, {}, {}
  for j = 1, nk do keys[j] = KEYS[k]; k = k + 1 end
  for j = 1, nd do dry[j] = ARGV[a]; a = a + 1 end
  for j = 1, nr do real[j] = ARGV[a]; a = a + 1 end
  limits[i] = { run = algorithms[id], keys = keys, dry = dry, real = real }
end

local replies, admitted, phase = {}, true, 0
if dry_only then
  for i = 1, m do
    replies[i] = limits[i].run(limits[i].keys, limits[i].dry)
    if replies[i][1] ~= 1 then admitted = false end
  end
else
  -- Dry runs of all but the last limit; then the last one for real (when it denies it has
  -- changed nothing, and its reply is what its dry run would have said); then the others for
  -- real, which must admit as their dry runs did, since nothing ran in between. A single limit
  -- thus needs no dry run at all.
  for i = 1, m - 1 do
    replies[i] = limits[i].run(limits[i].keys, limits[i].dry)
    if replies[i][1] ~= 1 then admitted = false end
  end
  if admitted then
    replies[m] = limits[m].run(limits[m].keys, limits[m].real)
    admitted = replies[m][1] == 1
    if admitted then
      phase = 1
      for i = 1, m - 1 do
        replies[i] = limits[i].run(limits[i].keys, limits[i].real)
        if replies[i][1] ~= 1 then admitted = false end
      end
    end
  else
    replies[m] = limits[m].run(limits[m].keys, limits[m].dry)
  end
end

local out = { admitted and 1 or 0, phase }
for i = 1, m do out[i + 2] = replies[i] end
return out
