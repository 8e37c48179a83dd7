"""catalog: TODO."""
