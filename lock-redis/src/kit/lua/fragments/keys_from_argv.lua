local nkeys = tonumber(ARGV[1])
local KEYS = {unpack(ARGV, 2, nkeys + 1)}
local ARGV = {unpack(ARGV, nkeys + 2)}
