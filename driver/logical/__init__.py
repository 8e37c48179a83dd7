"""logical: TODO."""
