"""skipping: TODO."""
