"""sql: TODO."""
