"""Context parsing and validation of the CDK app (no synthesis)."""

from __future__ import annotations

import json

import pytest

from .helpers import CDK_DIR

config = pytest.importorskip("squall_infra.config", reason="needs the infra extra (aws-cdk-lib)")


def test_defaults():
    cfg = config.SquallConfig.from_mapping({})
    assert (cfg.architecture, cfg.auth_mode, cfg.bucket_name, cfg.tracing) == ("arm64", "IAM", None, False)
    assert (cfg.exchange_ttl_days, cfg.results_ttl_days, cfg.log_retention_days) == (1, 7, 30)
    assert cfg.name_prefix == "Squall"


def test_cdk_json_lists_every_parameter_with_its_default():
    context = json.loads((CDK_DIR / "cdk.json").read_text())["context"]
    assert not [k for k in context if k.startswith("aws:")]  # reserved keys; the CLI warns about them
    fields = config.SquallConfig.__dataclass_fields__
    expected = {
        key: fields[name].metadata["default"] for key, name in config.SquallConfig.context_keys().items()
    }
    assert context == expected


def test_strings_from_the_command_line_are_converted():
    cfg = config.SquallConfig.from_mapping(
        {
            "workerMemoryMb": "2048",
            "tracing": "on",
            "reservedConcurrency": "50",
            "dataBuckets": '["a", "b/c"]',
            "bucketName": "none",
        }
    )
    assert (cfg.worker_memory_mb, cfg.tracing, cfg.reserved_concurrency) == (2048, True, 50)
    assert cfg.data_buckets == ["a", "b/c"]
    assert cfg.bucket_name is None
    assert cfg.data_locations == [(None, "data/"), ("a", ""), ("b", "c/")]
    assert config.SquallConfig.from_mapping({"dataBuckets": "x, s3://y/z/"}).data_buckets == [
        "x",
        "s3://y/z/",
    ]


@pytest.mark.parametrize(
    "context",
    [
        {"architecture": "sparc"},
        {"authMode": "COGNITO"},
        {"workerMemoryMb": "64"},
        {"timeoutSeconds": "901"},
        {"timeoutSeconds": "600", "driverTimeoutSeconds": "300"},
        {"logRetentionDays": "42"},
        {"tracing": "maybe"},
        {"maxWorkers": "lots"},
        {"reservedConcurrency": "0"},
        {"dataPrefix": "data"},
        {"bucketName": "Not_A_Bucket"},
        {"exchangeTtlDays": "0"},
    ],
)
def test_invalid_context_is_rejected(context):
    with pytest.raises(config.ConfigError):
        config.SquallConfig.from_mapping(context)


def test_describe_is_a_markdown_table():
    table = config.describe()
    assert table.count("\n") == len(config.SquallConfig.context_keys()) + 1
    assert "| `authMode` | `IAM` |" in table


def test_readme_documents_every_parameter():
    readme = (CDK_DIR.parent / "README.md").read_text()
    for key in config.SquallConfig.context_keys():
        assert f"| `{key}` |" in readme, key
