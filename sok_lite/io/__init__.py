"""Input and output of tables: sok.dump / sok.load (checkpoint, dump_target) and
sok.export_saved_model (serving, serving_init)."""
