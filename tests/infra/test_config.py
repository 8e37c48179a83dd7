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


def test_output_prefixes():
    cfg = config.SquallConfig.from_mapping(
        {"outputPrefixes": "s3://lake-out/squall/, s3://scratch-bucket/,s3://b-2/year=2024/x_y.z/"}
    )
    assert cfg.output_locations == [
        ("lake-out", "squall/"),
        ("scratch-bucket", ""),
        ("b-2", "year=2024/x_y.z/"),
    ]
    assert cfg.writable == "s3://lake-out/squall/,s3://scratch-bucket/,s3://b-2/year=2024/x_y.z/"
    assert config.SquallConfig.from_mapping({"outputPrefixes": '["s3://a-b/c/"]'}).output_prefixes == [
        "s3://a-b/c/"
    ]
    none = config.SquallConfig.from_mapping({})
    assert (none.output_prefixes, none.output_locations, none.writable) == ([], [], "")
    # Squall's own bucket: anything beside data/, exchange/, results/, queries/
    ok = config.SquallConfig.from_mapping(
        {"bucketName": "mine", "outputPrefixes": "s3://mine/out/,s3://mine/dat/"}
    )
    assert ok.output_locations == [("mine", "out/"), ("mine", "dat/")]


#: Output prefixes refused by the CDK config and by the Terraform variable (tests/infra/test_terraform.py).
BAD_OUTPUT_PREFIXES = [
    "s3://lake-out/squall",  # no trailing /
    "lake-out/squall/",  # no scheme
    "https://lake-out/squall/",
    "s3://lake-out/*/",  # IAM wildcards
    "s3://lake-out/a?/",
    "s3://lake-out/${aws:username}/",  # IAM policy variable
    "s3://lake-out/../data/",
    "s3://lake-out/./x/",
    "s3://lake-out/a//b/",
    "s3://Lake_Out/x/",  # not a bucket name
    "s3:///x/",
]


@pytest.mark.parametrize("prefix", BAD_OUTPUT_PREFIXES)
def test_bad_output_prefix_is_rejected(prefix):
    with pytest.raises(config.ConfigError, match="outputPrefixes"):
        config.SquallConfig.from_mapping({"outputPrefixes": json.dumps([prefix])})


@pytest.mark.parametrize(
    "prefixes",
    [
        ["s3://mine/"],  # the whole bucket holds exchange/ ...
        ["s3://mine/exchange/"],
        ["s3://mine/results/q1/"],
        ["s3://mine/data/"],  # read-only
        ["s3://mine/data/derived/"],
        ["s3://lake/x/", "s3://lake/x/"],  # twice
    ],
)
def test_output_prefix_overlapping_squall_areas_is_rejected(prefixes):
    with pytest.raises(config.ConfigError, match="outputPrefixes"):
        config.SquallConfig.from_mapping({"bucketName": "mine", "outputPrefixes": json.dumps(prefixes)})


def test_service_settings_reach_the_functions_as_json():
    cfg = config.SquallConfig.from_mapping({"serviceSettings": '{"user_running": 2, "max_running": 10}'})
    assert cfg.service_settings == '{"max_running":10,"user_running":2}'
    assert config.SquallConfig.from_mapping({"serviceSettings": {"max_queued": 5}}).service_settings == (
        '{"max_queued":5}'
    )
    for bad in ("[1]", "{", "10"):
        with pytest.raises(config.ConfigError, match="context serviceSettings: not"):
            config.SquallConfig.from_mapping({"serviceSettings": bad})
    with pytest.raises(config.ConfigError, match="lambdaConcurrency must be at least 1"):
        config.SquallConfig.from_mapping({"lambdaConcurrency": "0"})
