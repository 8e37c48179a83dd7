"""Squall."""
