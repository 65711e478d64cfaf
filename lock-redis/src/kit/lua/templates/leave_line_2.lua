if head and @announce@ then announce_turn('n - ' .. head .. ' ' .. string.format('%.0f', turn_seq), head) end
end
