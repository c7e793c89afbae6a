"""Tables: the storage of embedding rows (sok.Variable, sok.DynamicVariable), the TableKind
interface lookups, optimizers, exporters and planners read them through, and what a table is
made of (placement, key hashing, dtypes, initializers, disk tiers, staged rows)."""
