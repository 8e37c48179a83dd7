"""report: TODO."""
