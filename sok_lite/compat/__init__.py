"""SOK compatibility: the names of SOK 2.x (sok2) and SOK 1.x (sok_v1) on sok_lite tables."""
