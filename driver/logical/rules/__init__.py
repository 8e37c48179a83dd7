"""logical.rules: TODO."""
