if left then return 1 end
return 0
