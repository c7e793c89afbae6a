"""SOK compatibility: the names of SOK 2.x (sok2, sok2_variables, and sok2_dynamic, which makes
sok.DynamicVariable of the hash table) and SOK 1.x (sok_v1) on sok_lite tables."""
