
  if ARGV[3] ~= '' then
