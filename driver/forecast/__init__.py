"""forecast: TODO."""
