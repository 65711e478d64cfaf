  end
