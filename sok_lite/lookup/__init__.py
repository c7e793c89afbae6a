"""Lookups: sok.lookup_sparse over any tables, and the ragged / sparse id inputs it takes."""
