"""logical.decorrelate: TODO."""
