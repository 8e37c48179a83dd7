"""estimate: TODO."""
