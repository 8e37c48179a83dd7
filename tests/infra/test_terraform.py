"""The Terraform module: parsed with python-hcl2 and compared with the CDK template (parity)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import ALT_CONTEXT, ALT_OUTPUTS
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
            if st["sid"] in ("S3Exchange", "S3Queries"):
                assert resources == [f"${{local.bucket_arn}}/{st['sid'][2:].lower()}/*"]
            if st["sid"] == "InvokeSquallFunctions":
                targets = {"api": ["driver"], "driver": ["worker", "driver"]}.get(role, ["worker"])
                assert resources == [
                    arn
                    for t in targets
                    for arn in (f'${{local.function_arns["{t}"]}}', f'${{local.function_arns["{t}"]}}:*')
                ]
        for dyn in documents[role].get("dynamic", []):
            for statement in as_list(dyn.get("statement", [])):
                for content in as_list(statement["content"]):
                    if content["sid"] == "XRay":
                        assert statement["for_each"] == "${var.tracing ? [1] : []}"
                    elif content["sid"] in ("S3WriteStaging", "S3WriteOutputs"):  # test_writes_in_terraform
                        assert statement["for_each"] == "${length(local.output_locations) > 0 ? [1] : []}"
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


# ------------------------------------------------------------------------------------------ writes


def _dynamic_statements(role: str) -> dict[str, dict]:
    """sid -> {"for_each": ..., **content} of a policy document's dynamic statements."""
    out = {}
    for dyn in terraform()["data"]["aws_iam_policy_document"][role].get("dynamic", []):
        for statement in as_list(dyn.get("statement", [])):
            for content in as_list(statement["content"]):
                out[content["sid"]] = {"for_each": statement["for_each"], **content}
    return out


def test_writes_in_terraform(alt):
    """The write statements: the same sids and actions as the CDK stack's, only when output prefixes exist."""
    cdk = {
        role: {st["Sid"]: st for st in sts if st.get("Sid", "").startswith(("S3Write", "S3ListOutput"))}
        for role, sts in role_statements(alt.template).items()
    }
    worker, driver, api = (_dynamic_statements(r) for r in ROLES)
    only_with_outputs = "${length(local.output_locations) > 0 ? [1] : []}"
    assert worker["S3WriteStaging"] == {
        "for_each": only_with_outputs,
        "sid": "S3WriteStaging",
        "actions": as_list(cdk["worker"]["S3WriteStaging"]["Action"]),
        "resources": "${local.staging_object_arns}",
    }
    assert driver["S3WriteOutputs"] == {
        "for_each": only_with_outputs,
        "sid": "S3WriteOutputs",
        "actions": as_list(cdk["driver"]["S3WriteOutputs"]["Action"]),
        "resources": "${local.output_object_arns}",
    }
    listing = driver["S3ListOutput${statement.key}"]
    assert listing["for_each"] == "${local.output_locations}"
    assert listing["actions"] == ["s3:ListBucket"]
    assert listing["resources"] == ["arn:${local.partition}:s3:::${statement.value.bucket}"]
    (condition,) = listing["dynamic"]
    assert (
        condition["condition"]["for_each"]
        == '${statement.value.prefix == "" ? [] : [statement.value.prefix]}'
    )
    assert condition["condition"]["content"] == [
        {
            "test": "StringLike",
            "variable": "s3:prefix",
            "values": ["${condition.value}", "${condition.value}*"],
        }
    ]
    assert set(cdk["driver"]) == {"S3WriteOutputs", *(f"S3ListOutput{i}" for i in range(len(ALT_OUTPUTS)))}
    assert set(cdk["worker"]) == {"S3WriteStaging"} and not cdk["api"]
    assert not [sid for sid in api if sid.startswith(("S3Write", "S3ListOutput"))]
    assert not [sid for sid in worker if sid.startswith("S3ListOutput")]
    # SQUALL_WRITABLE reaches every function; overlaps with Squall's own areas stop the plan
    res = terraform()["resource"]
    (env,) = res["aws_lambda_function"]["fn"]["environment"]
    assert "SQUALL_USERS = var.users" in env["variables"]  # the API function only
    assert (
        env["variables"]
        .replace(" ", "")
        .replace("\n", "")
        .startswith("${merge(local.environment,local.write_environment,{SQUALL_ROLE=each.key},")
    )
    (lifecycle,) = res["aws_iam_role_policy"]["fn"]["lifecycle"]
    assert lifecycle["precondition"][0]["condition"] == "${length(local.output_conflicts) == 0}"


@pytest.fixture(scope="module")
def tf_console(tmp_path_factory: pytest.TempPathFactory):
    """``tf_console(expression, **variables)`` -> (value or None, stderr): ``writes.tf`` and ``variables.tf``
    evaluated by ``terraform console`` in a module of their own (no provider, so no download), with the
    locals they use from ``main.tf``'s values."""
    exe = shutil.which("terraform")
    if exe is None:
        pytest.skip("no terraform binary")
    root = tmp_path_factory.mktemp("tf-writes")
    for name in ("variables.tf", "writes.tf"):
        shutil.copy(TF_DIR / name, root / name)
    main = terraform()["locals"]
    stub = {
        "partition": "aws",
        **{k: main[k] for k in ("exchange_prefix", "results_prefix", "queries_prefix")},
    }
    (root / "stub.tf").write_text("locals {\n" + "".join(f'  {k} = "{v}"\n' for k, v in stub.items()) + "}\n")
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "TF_CLI_CONFIG_FILE": "/dev/null", "HOME": str(root)}
    init = subprocess.run([exe, "init", "-input=false", "-no-color"], cwd=root, capture_output=True, text=True,
                          timeout=120, env=env)  # fmt: skip
    assert init.returncode == 0, init.stdout + init.stderr

    def evaluate(expression: str, **variables: object) -> tuple[object, str]:
        var_file = Path(root / "vars.tfvars.json")
        var_file.write_text(json.dumps(variables))
        proc = subprocess.run(
            [exe, "console", "-no-color", f"-var-file={var_file}"],
            input=f"jsonencode({expression})\n", cwd=root, capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
        if "Error:" in proc.stderr:
            return None, " ".join(proc.stderr.split())  # terraform wraps its messages
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads(json.loads(proc.stdout.strip())), proc.stderr

    return evaluate


def test_terraform_writes_evaluated(tf_console, alt):
    """``terraform console`` on the write locals: the same ARNs and environment as the CDK template."""
    prefixes = ALT_CONTEXT["outputPrefixes"].split(",")
    value, err = tf_console(
        "{locations = local.output_locations, staging = local.staging_object_arns, outputs = "
        "local.output_object_arns, env = local.write_environment, conflicts = local.output_conflicts}",
        output_prefixes=prefixes,
        bucket_name=ALT_CONTEXT["bucketName"],
    )
    assert value is not None, err
    cdk = {st.get("Sid"): st for role in ("worker", "driver") for st in role_statements(alt.template)[role]}
    aws = [r.replace("${AWS::Partition}", "aws") for r in as_list(cdk["S3WriteStaging"]["Resource"])]
    assert value["staging"] == aws
    assert value["outputs"] == [
        r.replace("${AWS::Partition}", "aws") for r in cdk["S3WriteOutputs"]["Resource"]
    ]
    assert [(loc["bucket"], loc["prefix"]) for loc in value["locations"]] == list(ALT_OUTPUTS)
    fn_env = function_by_handler(alt.template)["driver"]["Environment"]["Variables"]
    assert value["env"] == {"SQUALL_WRITABLE": fn_env["SQUALL_WRITABLE"]}
    assert value["conflicts"] == []
    # no output prefixes: no locations, so no write statement and no SQUALL_WRITABLE
    value, err = tf_console("[local.output_locations, local.write_environment]")
    assert value == [[], {}], err


def test_terraform_refuses_what_the_cdk_config_refuses(tf_console):
    from .test_config import BAD_OUTPUT_PREFIXES

    for prefix in BAD_OUTPUT_PREFIXES:
        value, err = tf_console("local.output_locations", output_prefixes=[prefix])
        assert value is None and "output_prefixes: each must look like" in err, prefix
    value, err = tf_console("local.output_locations", output_prefixes=["s3://lake/x/", "s3://lake/x/"])
    assert value is None and "none listed twice" in err
    # overlaps with Squall's own areas in its (existing) bucket: the precondition's list
    for prefix in ("s3://mine/", "s3://mine/exchange/", "s3://mine/results/q1/", "s3://mine/data/",
                   "s3://mine/data/derived/"):  # fmt: skip
        value, err = tf_console(
            "local.output_conflicts", output_prefixes=[prefix, "s3://mine/out/"], bucket_name="mine"
        )
        assert value == [prefix], (prefix, err)
    value, err = tf_console(
        "local.output_conflicts", output_prefixes=["s3://mine/exchange/"], bucket_name="other"
    )
    assert value == [], err
