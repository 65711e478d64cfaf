if head and ARGV[2] ~= '0' then announce_turn('n - ' .. head .. ' ' .. string.format('%.0f', turn_seq), head) end
end
