"""Thin wrappers over the custom ops, one module per op family, gradients beside them."""
