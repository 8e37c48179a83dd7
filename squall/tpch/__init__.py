"""TPC-H data generation and query texts."""
