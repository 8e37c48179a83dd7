"""The version of the squall distribution (one place; ``squall.__version__`` re-exports it)."""

__version__ = "0.1.0"
