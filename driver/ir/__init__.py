"""ir: TODO."""
