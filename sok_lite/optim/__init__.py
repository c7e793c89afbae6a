"""Optimizers: the row-wise update of tables (rules, slots, clipping), the Keras optimizer
wrappers and sok.optimizers, and OptimizerScope."""
