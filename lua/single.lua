-- single.lua: the driver of a one-key decision. redis/detail/script.hpp composes the body as
-- lua/prelude.lua, then the algorithm's script as `local decide, write = (function() ... end)()`,
-- then this. An algorithm's script returns two functions (core/wire.hpp):
--   decide(key, ARGV, offset): reads the key, decides from ARGV[offset + 1], ... and returns its
--     reply, and whether the request is to be written (admitted and not a peek);
--   write(key, ARGV, offset, reply): writes the new state and its TTL.
-- Neither is a closure made per call: a call costs what its commands and arithmetic cost.

local reply, admitted = decide(KEYS[1], ARGV, 0)
if admitted then write(KEYS[1], ARGV, 0, reply) end
return reply
