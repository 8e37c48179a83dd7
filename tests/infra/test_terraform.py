"""The Terraform module: parsed with python-hcl2 and compared with the CDK template (parity)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from .helpers import (
    ROLES,
    TF_DIR,
    as_list,
    camel,
    function_by_handler,
    pascal,
    render,
    resources_of,
    role_statements,
    terraform,
    tf_default,
    tf_resolve,
)

pytest.importorskip("hcl2", reason="needs the infra extra (python-hcl2)")


def test_variables_match_cdk_context():
    from squall_infra.config import SquallConfig

    fields = SquallConfig.__dataclass_fields__
    tf_only = {"function_code_dir", "tags"}
    variables = set(terraform()["variable"]) - tf_only
    assert {camel(v) for v in variables} == set(SquallConfig.context_keys())
    for name in variables:
        assert tf_default(name) == fields[name].metadata["default"], name


def test_outputs_match_cdk_outputs(default):
    cdk_outputs = set(default.template["Outputs"]) - {
        o for o in default.template["Outputs"] if "Endpoint" in o
    }
    tf_outputs = {pascal(o) for o in terraform()["output"]}
    assert cdk_outputs <= tf_outputs
    assert tf_outputs - cdk_outputs == {"ApiKeyId"}  # CDK has it in API_KEY mode only


def test_functions_match(default):
    tf = terraform()
    locals_ = tf["locals"]
    cdk_fns = function_by_handler(default.template)
    assert {r: f"squall.functions.{r}.handler" for r in ROLES} == locals_["handlers"]
    fn = tf["resource"]["aws_lambda_function"]["fn"]
    assert fn["runtime"] == "python3.12"
    assert fn["handler"] == "${each.value}"
    assert fn["architectures"] == ["${var.architecture}"]
    assert tf_default("architecture") == cdk_fns["worker"]["Architectures"][0]
    for role in ROLES:
        sizes = {k: tf_resolve(v) for k, v in locals_["sizes"][role].items()}
        props = cdk_fns[role]
        assert sizes == {
            "memory": props["MemorySize"],
            "timeout": props["Timeout"],
            "storage": props["EphemeralStorage"]["Size"],
        }, role
        assert props["FunctionName"] == f"{tf_default('stack_name')}-{role}"
    assert tf["resource"]["aws_lambda_function_event_invoke_config"]["fn"]["maximum_retry_attempts"] == 0
    layer = tf["resource"]["aws_lambda_layer_version"]["deps"]
    assert layer["compatible_runtimes"] == ["python3.12"]


def test_environment_matches(default):
    tf_env = {k: tf_resolve(v) for k, v in terraform()["locals"]["environment"].items()}
    tf_env["SQUALL_ROLE"] = "${each.key}"
    for role, props in function_by_handler(default.template).items():
        cdk_env = render(props["Environment"]["Variables"])
        assert set(cdk_env) == set(tf_env), role
        for key, value in cdk_env.items():
            tf_value = tf_env[key]
            if key == "SQUALL_ROLE":
                assert value == role
            elif key == "SQUALL_BUCKET":
                assert tf_value == "${local.bucket_name}"
            elif key in ("SQUALL_WORKER_FUNCTION", "SQUALL_DRIVER_FUNCTION"):
                assert tf_value == f'${{local.function_names["{key.split("_")[1].lower()}"]}}'
            else:
                assert tf_value == value, key


def test_iam_actions_match(default):
    """Same statements (by Sid) with the same actions, per function."""
    documents = terraform()["data"]["aws_iam_policy_document"]
    for role, statements in role_statements(default.template).items():
        cdk = {s["Sid"]: sorted(as_list(s["Action"])) for s in statements}
        tf = {s["sid"]: sorted(s["actions"]) for s in documents[role]["statement"]}
        assert cdk == tf, role


def test_iam_scoping_in_terraform():
    """Every static S3/Lambda resource is a bucket prefix or a function ARN, never '*'."""
    documents = terraform()["data"]["aws_iam_policy_document"]
    for role in ROLES:
        for st in documents[role]["statement"]:
            resources = as_list(st["resources"])
            assert "*" not in resources
            if st["sid"] in ("S3Exchange", "S3Results", "S3Queries"):
                assert resources == [f"${{local.bucket_arn}}/{st['sid'][2:].lower()}/*"]
            if st["sid"] == "InvokeSquallFunctions":
                target = "driver" if role == "api" else "worker"
                assert resources == [
                    f'${{local.function_arns["{target}"]}}',
                    f'${{local.function_arns["{target}"]}}:*',
                ]
        for dyn in documents[role].get("dynamic", []):
            for statement in as_list(dyn.get("statement", [])):
                for content in as_list(statement["content"]):
                    if content["sid"] == "XRay":
                        assert statement["for_each"] == "${var.tracing ? [1] : []}"
                    else:
                        assert content["actions"] == ["s3:ListBucket"]


def test_lifecycle_matches(default):
    rules = terraform()["resource"]["aws_s3_bucket_lifecycle_configuration"]["this"]["rule"]
    tf = set()
    for r in rules:
        prefix = r["filter"][0].get("prefix")
        days = tf_resolve(r["expiration"][0]["days"]) if "expiration" in r else None
        abort = r.get("abort_incomplete_multipart_upload", [{}])[0].get("days_after_initiation")
        tf.add((r["id"], prefix, days, abort))
    bucket = next(iter(resources_of(default.template, "AWS::S3::Bucket").values()))
    cdk = {
        (
            r["Id"],
            r.get("Prefix"),
            r.get("ExpirationInDays"),
            r.get("AbortIncompleteMultipartUpload", {}).get("DaysAfterInitiation"),
        )
        for r in bucket["Properties"]["LifecycleConfiguration"]["Rules"]
    }
    assert tf == cdk


def test_bucket_security_matches():
    res = terraform()["resource"]
    block = res["aws_s3_bucket_public_access_block"]["this"]
    assert all(block[k] is True for k in ("block_public_acls", "block_public_policy", "ignore_public_acls",
                                          "restrict_public_buckets"))  # fmt: skip
    sse = res["aws_s3_bucket_server_side_encryption_configuration"]["this"]["rule"][0]
    assert sse["apply_server_side_encryption_by_default"][0]["sse_algorithm"] == "AES256"
    policy = terraform()["data"]["aws_iam_policy_document"]["bucket_tls"]["statement"]
    assert {s["sid"] for s in policy} == {"DenyInsecureTransport", "DenyOldTls"}


def test_api_matches():
    res = terraform()["resource"]
    method = res["aws_api_gateway_method"]["any"]
    assert method["authorization"] == '${var.auth_mode == "IAM" ? "AWS_IAM" : "NONE"}'
    assert method["api_key_required"] == '${var.auth_mode == "API_KEY"}'
    assert res["aws_api_gateway_resource"]["proxy"]["path_part"] == "{proxy+}"
    assert res["aws_api_gateway_integration"]["any"]["type"] == "AWS_PROXY"
    settings = res["aws_api_gateway_method_settings"]["all"]["settings"][0]
    assert settings["throttling_rate_limit"] == "${var.throttle_rate_limit}"
    assert res["aws_api_gateway_stage"]["v1"]["stage_name"] == "squall"
    assert (
        "application/vnd.apache.arrow.stream" in res["aws_api_gateway_rest_api"]["this"]["binary_media_types"]
    )
    assert "access_log_settings" in res["aws_api_gateway_stage"]["v1"]
    assert res["aws_cloudwatch_log_group"]["fn"]["retention_in_days"] == "${var.log_retention_days}"


@pytest.mark.skipif(shutil.which("terraform") is None, reason="no terraform binary")
def test_terraform_fmt():
    proc = subprocess.run(
        ["terraform", "fmt", "-check", "-diff", "-recursive", str(TF_DIR)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "TF_CLI_CONFIG_FILE": "/dev/null"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
