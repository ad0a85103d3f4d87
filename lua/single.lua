-- single.lua: the driver of a one-key decision. redis/detail/script.hpp composes the body as
-- lua/prelude.lua, then the algorithm's script as `local decide = (function() ... end)()`, then
-- this. An algorithm's script returns its decide function: decide(key, ARGV, offset) reads the
-- key, decides from ARGV[offset + 1], ... and returns its reply, plus, when the request is
-- admitted and not a peek, the function that writes the new state.

local reply, commit = decide(KEYS[1], ARGV, 0)
if commit then commit() end
return reply
