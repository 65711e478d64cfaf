if head and ARGV[2] ~= '1' then announce_turn('n - ' .. head .. ' ' .. string.format('%.0f', turn_seq), head) end
end
