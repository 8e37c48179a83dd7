"""frontend: TODO."""
