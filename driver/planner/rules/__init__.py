"""planner.rules: TODO."""
