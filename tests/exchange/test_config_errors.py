"""Mistakes in exchange options are the user's to fix: :class:`ExchangeConfigError` (an OptionError,
exit 1 / HTTP 4xx), never a plain ExchangeError (exit 2 / HTTP 502). No S3 server or libfabric needed:
every check runs before the first request.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from squall.errors import OptionError
from squall.exchange.base import ExchangeConfigError, exchange_factory, open_exchange
from squall.exchange.fabric import native_available
from squall.exchange.s3 import choose_levels, ipc_options


def _s3(**options):
    return exchange_factory("s3", bucket_url="s3://bucket/prefix", check_bucket=False, **options)


def test_config_error_is_an_option_error():
    assert issubclass(ExchangeConfigError, OptionError)


def test_unknown_exchange_name():
    with pytest.raises(
        ExchangeConfigError, match=r"unknown exchange 'carrier-pigeon' \(choose one of: fabric"
    ):
        exchange_factory("carrier-pigeon")
    with pytest.raises(ExchangeConfigError, match="unknown exchange 'nope'"):
        open_exchange({"name": "nope"}, 0, 1)


@pytest.mark.parametrize("url", ["bucket/prefix", "s3:/bucket", "http://bucket/x", "s3://"])
def test_s3_bad_bucket_url(url):
    with pytest.raises(ExchangeConfigError, match="exchange bucket_url must look like s3://bucket/prefix"):
        exchange_factory("s3", bucket_url=url)


def test_s3_unknown_option():
    with pytest.raises(ExchangeConfigError, match="unknown S3 exchange option"):
        _s3(levls=2)


@pytest.mark.parametrize("levels", [3, "two", 0])
def test_s3_bad_levels(levels):
    with pytest.raises(ExchangeConfigError, match="exchange levels must be 1, 2 or 'auto'"):
        _s3(levels=levels)
    with pytest.raises(ExchangeConfigError):
        choose_levels(None, levels, 16)  # type: ignore[arg-type]


def test_s3_bad_compression():
    with pytest.raises(ExchangeConfigError, match="unsupported exchange compression 'gzip'"):
        _s3(compression="gzip")
    with pytest.raises(ExchangeConfigError):
        ipc_options("brotli")


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("timeout_s", "soon"),
        ("threads", 0),
        ("max_pool_connections", -1),
        ("part_size", None),
        ("max_retries", -2),
    ],
)
def test_s3_bad_numbers(option, value):
    with pytest.raises(ExchangeConfigError, match=f"exchange option {option} must be a number"):
        _s3(**{option: value})


def test_s3_bad_retry_mode():
    with pytest.raises(ExchangeConfigError, match="retry_mode must be one of standard, adaptive, legacy"):
        _s3(retry_mode="eager")


def test_s3_good_options_pass():
    factory = _s3(
        levels="auto", compression="lz4", timeout_s=5, threads=4, retry_mode="adaptive", max_retries=0
    )
    assert factory.options["retry_mode"] == "adaptive"


def test_local_unknown_option_and_bad_timeout(tmp_path):
    with pytest.raises(ExchangeConfigError, match="unknown local exchange option"):
        exchange_factory("local", root=str(tmp_path), folder=str(tmp_path))
    with pytest.raises(ExchangeConfigError, match="exchange option timeout_s must be a number"):
        exchange_factory("local", root=str(tmp_path), timeout_s=-1)


def test_fabric_unknown_option_and_bad_values():
    with pytest.raises(ExchangeConfigError, match="unknown fabric exchange option"):
        exchange_factory("fabric", provder="tcp")
    with pytest.raises(ExchangeConfigError, match="exchange option port must be a number"):
        exchange_factory("fabric", port="http")
    with pytest.raises(ExchangeConfigError, match="fabric provider must be a name"):
        exchange_factory("fabric", provider=7)
    with pytest.raises(
        ExchangeConfigError, match="fabric schedule must be one of auto, open-shop, rotated, not 'fast'"
    ):
        exchange_factory("fabric", schedule="fast")
    with pytest.raises(ExchangeConfigError, match="exchange option schedule_quantum must be a number >= 1"):
        exchange_factory("fabric", schedule_quantum=0)
    with pytest.raises(ExchangeConfigError, match="exchange option schedule_min_bytes must be a number >= 0"):
        exchange_factory("fabric", schedule_min_bytes="lots")


def test_fabric_without_libfabric_is_a_config_error():
    """Asking for the fabric exchange where the native module cannot load: exit 1, not 2."""
    code = """
import sys
sys.modules["squall_fabric._native"] = None  # as if the native module or libfabric were missing
from squall.exchange.base import ExchangeConfigError, exchange_factory
try:
    exchange_factory("fabric").prepare("q1", 2)
except ExchangeConfigError as exc:
    print(type(exc).__name__)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "FabricUnavailable", out.stderr


@pytest.mark.skipif(native_available() is not None, reason=str(native_available()))
def test_fabric_unknown_provider_is_a_config_error():
    code = """
from squall.exchange.base import ExchangeConfigError
from squall.exchange.fabric import Endpoint
try:
    Endpoint("no-such-provider")
except ExchangeConfigError as exc:
    print(type(exc).__name__)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "FabricOpenError", out.stderr
