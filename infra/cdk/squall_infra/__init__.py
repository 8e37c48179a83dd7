"""Squall's AWS CDK app: the :class:`SquallStack` and its configuration."""

from squall_infra.config import ConfigError, SquallConfig
from squall_infra.stack import SquallStack

__all__ = ["ConfigError", "SquallConfig", "SquallStack"]
