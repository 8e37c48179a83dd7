"""Least privilege, proven: the serverless path under IAM enforcement with exactly the stack's policies.

moto's server enforces IAM (:mod:`.iam_moto`); each Squall function acts as an IAM user holding exactly the
policy documents the synthesized CDK template gives its role (intrinsics resolved to this test's bucket and
function ARNs; the Terraform module's documents are checked equal to them in ``test_terraform.py``):

- the **API** function's handler runs in this process with the API's keys,
- it invokes the **driver** function — the real driver handler in the local Lambda emulator, with the
  driver's keys and the driver's environment from the template (``lambda-local`` instead of ``lambda``),
- whose ``lambda-local`` platform invokes the **worker** function — the real worker handler in the
  emulator, with the worker's keys (``SQUALL_WORKER_ENV``).

Every invocation is checked as on AWS (a DryRun signed with the caller's keys, ``SQUALL_LOCAL_LAMBDA_AUTHORIZE``).
TPC-H queries at W=2 (one with a shuffle exchange), a COPY to the output prefix and the catalog succeed;
reading outside the policy, writing outside the output prefixes and invoking another function are
AccessDenied, reported as one line naming the resource, the action and the role.
"""

from __future__ import annotations

import base64
import copy
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from botocore.exceptions import ClientError

from squall import tpch
from squall.errors import AccessDenied
from squall.testing import assert_same_result

from .helpers import function_by_handler
from .iam_env import (
    IamMoto,
    cdk_policies,
    resolve,
    start_iam_moto,
    terraform_module_stub,
    terraform_policies,
    unused_grants,
)

pytest.importorskip("aws_lambda_powertools")
pytest.importorskip("moto")

BUCKET = "squall-iam-bucket"
OUT_BUCKET = "squall-iam-out"
OTHER_BUCKET = "squall-iam-other"
OUTPUT_PREFIX = f"s3://{OUT_BUCKET}/lake/"
CONTEXT = {"functionNamePrefix": "squall", "outputPrefixes": OUTPUT_PREFIX}
EVENTS = Path(__file__).resolve().parents[1] / "service" / "events"
QUERIES = (1, 3, 12)  # Q3 and Q12 join on keys the tables are not split by: a shuffle exchange at W=2


@pytest.fixture(scope="module")
def stack(synth, sf001, tmp_path_factory):
    """moto with IAM enforcement, the bucket with TPC-H SF0.01 under data/, a user per function role."""
    synthesized = synth(**CONTEXT)
    root = tmp_path_factory.mktemp("iam")
    server = start_iam_moto(root / "moto.log", audit=root / "granted.jsonl")
    try:
        s3 = server.client("s3")
        for bucket in (BUCKET, OUT_BUCKET, OTHER_BUCKET):
            s3.create_bucket(Bucket=bucket)
        for path in sorted(Path(sf001).glob("*.parquet")):
            s3.upload_file(str(path), BUCKET, f"data/{path.name}")
        secret = pa.table({"secret": ["s3cr3t"]})
        sink = pa.BufferOutputStream()
        pq.write_table(secret, sink)
        for bucket, key in ((BUCKET, "private/secret.parquet"), (OTHER_BUCKET, "data/secret.parquet")):
            s3.put_object(Bucket=bucket, Key=key, Body=sink.getvalue().to_pybytes())
        policies = cdk_policies(synthesized.template, BUCKET)
        keys = {role: server.user(f"squall-{role}-role", docs) for role, docs in policies.items()}
        for role in keys:
            server.function(f"squall-{role}")
        yield Stack(server, keys, synthesized.template, policies, root / "granted.jsonl")
    finally:
        server.stop()


class Stack:
    """The running pieces: server, per-role keys, template, resolved policies."""

    def __init__(
        self, server: IamMoto, keys: dict[str, Any], template: dict, policies: dict, audit: Path
    ) -> None:
        self.server, self.keys, self.template, self.policies = server, keys, template, policies
        self.audit = audit

    def function_env(self, role: str) -> dict[str, str]:
        """The function's environment from the template (resolved), its keys, and the emulator's settings."""
        props = function_by_handler(self.template)[role]
        refs = {k: BUCKET for k in self.template["Resources"] if k.startswith("Bucket")}
        env = resolve(props["Environment"]["Variables"], refs, {})
        env.update(self.server.env(self.keys[role]), SQUALL_LOCAL_LAMBDA_AUTHORIZE="1",
                   POWERTOOLS_TRACE_DISABLED="1")  # fmt: skip
        if role == "driver":
            env.update(SQUALL_PLATFORM="lambda-local", SQUALL_DEFAULT_WORKERS="2",
                       SQUALL_WORKER_ENV=json.dumps(self.function_env("worker")))  # fmt: skip
        return env


def _clean_aws_env(monkeypatch) -> None:
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_LAMBDA", "SQUALL_DATA",
                 "SQUALL_STATE", "SQUALL_WRITABLE", "SQUALL_WORKER_ENV"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def deployed(stack):
    """The API handler in this process as the API's user, with the driver function emulated."""
    from squall.driver.platforms.lambda_.emulator import LocalLambda
    from squall.service import backend as backend_module

    mp = pytest.MonkeyPatch()
    _clean_aws_env(mp)
    for name, value in stack.function_env("api").items():
        mp.setenv(name, value)
    driver = LocalLambda("squall.functions.driver.handler", function_name="squall-driver", concurrency=1,
                         timeout_s=120, env=stack.function_env("driver"))  # fmt: skip
    mp.setattr(backend_module.LambdaBackend, "client", property(lambda self: driver))
    from squall.functions import api

    mp.setattr(api, "_handler", None)
    try:
        yield api
    finally:
        driver.close()
        mp.undo()


def _event(name: str, **changes: Any) -> dict:
    e = json.loads((EVENTS / f"apigw_rest_{name}.json").read_text())
    e.update(changes)
    return e


def _call(
    api, name: str, *, path: str | None = None, body: Any = None, key: str | None = None
) -> tuple[int, Any]:
    e = _event(name)
    if path is not None:
        e["path"] = path
    if body is not None:
        e["body"] = json.dumps(body)
    if key is not None:
        e["headers"]["Idempotency-Key"] = e["multiValueHeaders"]["Idempotency-Key"][0] = key
    response = api.handler(copy.deepcopy(e), None)
    raw = response["body"] or ""
    data = base64.b64decode(raw) if response.get("isBase64Encoded") else raw.encode()
    return response["statusCode"], data


def _run(api, sql: str, key: str) -> dict:
    """Submit through the API, poll until the query ends; its status document."""
    code, body = _call(api, "post_query", body={"sql": sql, "workers": 2}, key=key)
    assert code == 202, body
    query_id = json.loads(body)["query_id"]
    deadline = time.monotonic() + 120
    while True:
        code, body = _call(api, "get_query", path=f"/v1/queries/{query_id}")
        doc = json.loads(body)
        if doc["status"] in ("succeeded", "failed", "cancelled") or time.monotonic() > deadline:
            return doc
        time.sleep(0.2)


def _result(api, query_id: str) -> pa.Table:
    e = _event("get_result")
    e["path"] = f"/v1/queries/{query_id}/result"
    e["queryStringParameters"] = {"format": "arrow"}
    e["multiValueQueryStringParameters"] = {"format": ["arrow"]}
    response = api.handler(e, None)
    assert response["statusCode"] == 200, response
    return pa.ipc.open_stream(base64.b64decode(response["body"])).read_all()


# ----------------------------------------------------------------------------------------- allowed


def test_queries_copy_and_catalog_succeed_with_exactly_the_stack_policies(deployed, stack, reference_sf001):
    code, body = _call(deployed, "get_query", path="/v1/tables")
    assert code == 200, body
    assert {"lineitem", "orders", "customer"} <= {t["name"] for t in json.loads(body)["tables"]}
    for n in QUERIES:
        sql = tpch.query(n, sf=0.01)
        doc = _run(deployed, sql, key=f"tpch-{n}")
        assert doc["status"] == "succeeded", doc.get("error")
        assert_same_result(_result(deployed, doc["query_id"]), reference_sf001.sql(sql).to_arrow_table(), sql)
    copy_sql = f"COPY (SELECT n_nationkey, n_name FROM nation) TO '{OUTPUT_PREFIX}nation/' (FORMAT parquet)"
    doc = _run(deployed, copy_sql, key="copy-1")
    assert doc["status"] == "succeeded", doc
    listed = stack.server.client("s3").list_objects_v2(Bucket=OUT_BUCKET, Prefix="lake/nation/")
    keys = [o["Key"] for o in listed.get("Contents", [])]
    assert any(k.endswith(".parquet") for k in keys) and any("_squall_commit_" in k for k in keys), keys
    assert not [k for k in keys if ".squall-staging" in k], keys  # the driver cleaned up its staging
    code, _body = _call(deployed, "get_query", path="/v1/queries/q0123456789abcdef0123456789abcdef")
    assert code == 404  # not a 403: the API may list queries/


# ------------------------------------------------------------------------------------------ denied


def _one_line(message: str) -> str:
    assert "\n" not in message and "Traceback" not in message, message
    return message


def test_denials_named_in_one_line(stack, sf001, monkeypatch):
    """Outside the policy, with each role's own keys: reads, writes, invocations."""
    import squall

    _clean_aws_env(monkeypatch)
    for name, value in stack.function_env("driver").items():
        if name != "SQUALL_PLATFORM":
            monkeypatch.setenv(name, value)
    worker_env = stack.function_env("worker")
    # a table the driver may list and read (under the output prefix) but the worker may not read
    stack.server.client("s3").upload_file(
        str(Path(sf001) / "nation.parquet"), OUT_BUCKET, "lake/nation.parquet"
    )
    con = squall.connect(
        OUTPUT_PREFIX, workers=2, platform="lambda-local", platform_options={"worker_env": worker_env}
    )
    with pytest.raises(AccessDenied) as err:
        con.sql("SELECT count(*) FROM nation").fetchall()
    message = _one_line(str(err.value))
    assert f"{OUTPUT_PREFIX}nation.parquet" in message and "s3:GetObject" in message, message
    assert "worker's role" in message, message
    con.close()
    # a data location outside the policy: the driver may not list it
    with pytest.raises(AccessDenied) as err:
        squall.connect(f"s3://{BUCKET}/private/", workers=2, platform="lambda-local",
                       platform_options={"worker_env": worker_env}).sql("SELECT * FROM secret")  # fmt: skip
    message = _one_line(str(err.value))
    assert f"s3://{BUCKET}/private/" in message and "s3:ListBucket" in message and "driver's role" in message
    # writing outside the output prefixes, with a connection that would allow it: IAM refuses it
    rogue = f"s3://{BUCKET}/rogue/"
    con = squall.connect(f"s3://{BUCKET}/data/", workers=2, platform="lambda-local", writable=[rogue],
                         platform_options={"worker_env": worker_env})  # fmt: skip
    with pytest.raises(AccessDenied) as err:
        con.sql(f"COPY nation TO '{rogue}nation/' (FORMAT parquet)").fetchall()
    message = _one_line(str(err.value))
    # the driver's existence check of the target comes first (a worker could not stage there either)
    assert f"{rogue}nation/ (s3:ListBucket) for the driver's role" in message, message
    # a location under the output prefix but not one of the stack's output prefixes: the driver may check and
    # commit there (``lake/*``), the workers may stage only under ``lake/.squall-staging/``
    nested = f"{OUTPUT_PREFIX}sub/"
    con = squall.connect(f"s3://{BUCKET}/data/", workers=2, platform="lambda-local", writable=[nested],
                         platform_options={"worker_env": worker_env})  # fmt: skip
    with pytest.raises(AccessDenied) as err:
        con.sql(f"COPY nation TO '{nested}nation/' (FORMAT parquet)").fetchall()
    message = _one_line(str(err.value))
    assert f"{nested}.squall-staging/" in message and "(s3:PutObject) for the worker's role" in message, (
        message
    )
    con.close()
    # invoking another function than the worker
    con = squall.connect(f"s3://{BUCKET}/data/", workers=2, platform="lambda-local",
                         platform_options={"worker_env": worker_env, "function": "squall-api"})  # fmt: skip
    with pytest.raises(AccessDenied) as err:
        con.sql("SELECT count(*) FROM nation").fetchall()
    message = _one_line(str(err.value))
    assert "squall-api" in message and "lambda:InvokeFunction" in message and "driver's role" in message
    con.close()


def test_each_role_is_held_to_its_policy(stack):
    """Direct calls with each role's keys: what the stack grants works, its neighbours are AccessDenied."""
    worker, driver, api = (stack.keys[r] for r in ("worker", "driver", "api"))
    s3w, s3d, s3a = (stack.server.client("s3", k) for k in (worker, driver, api))
    assert s3w.get_object(Bucket=BUCKET, Key="data/nation.parquet")["Body"].read()
    denied = [
        lambda: s3w.get_object(Bucket=BUCKET, Key="private/secret.parquet"),  # another prefix
        lambda: s3w.get_object(Bucket=OTHER_BUCKET, Key="data/secret.parquet"),  # another bucket
        lambda: s3w.list_objects_v2(Bucket=BUCKET, Prefix="private/"),
        lambda: s3w.list_objects_v2(Bucket=BUCKET, Prefix="queries/"),
        lambda: s3w.put_object(Bucket=BUCKET, Key="data/x.parquet", Body=b"x"),  # data/ is read-only
        lambda: s3w.put_object(Bucket=OUT_BUCKET, Key="lake/final.parquet", Body=b"x"),  # only staging
        lambda: s3w.delete_object(Bucket=BUCKET, Key="exchange/x"),
        lambda: s3d.put_object(Bucket=BUCKET, Key="data/x.parquet", Body=b"x"),
        lambda: s3d.put_object(Bucket=OUT_BUCKET, Key="elsewhere/x", Body=b"x"),
        lambda: s3d.get_object(Bucket=BUCKET, Key="private/secret.parquet"),
        lambda: s3a.get_object(Bucket=BUCKET, Key="data/nation.parquet"),  # the API never reads data
        lambda: s3a.put_object(Bucket=BUCKET, Key="results/x", Body=b"x"),
        lambda: s3a.list_objects_v2(Bucket=BUCKET, Prefix="data/"),
    ]
    for call in denied:
        with pytest.raises(ClientError) as err:
            call()
        assert err.value.response["Error"]["Code"] == "AccessDenied"
    lam = {role: stack.server.client("lambda", stack.keys[role]) for role in ("worker", "driver", "api")}
    # the driver starts the next queued query when its own ends (admission on the deployed API)
    allowed = {
        "worker": {"squall-worker"},
        "driver": {"squall-worker", "squall-driver"},
        "api": {"squall-driver"},
    }
    for role, client in lam.items():
        for target in ("squall-worker", "squall-driver", "squall-api"):
            kwargs = {"FunctionName": target, "InvocationType": "DryRun", "Payload": b"{}"}
            if target in allowed[role]:
                assert client.invoke(**kwargs)["StatusCode"] == 204
            else:
                with pytest.raises(ClientError) as err:
                    client.invoke(**kwargs)
                assert "AccessDenied" in str(err.value), (role, target)


#: Grants no request of this module uses, and why they stay.
EXPECTED_UNUSED = {
    # the Lambda runtime writes the function's logs with its role; nothing here runs CloudWatch Logs
    *((role, "OwnLogGroup", action) for role in ("worker", "driver", "api")
      for action in ("logs:CreateLogStream", "logs:PutLogEvents")),
    # aborting a multipart upload only happens when one fails (exchange parts, staged parts, committed copies)
    ("worker", "S3Exchange", "s3:AbortMultipartUpload"),
    ("worker", "S3WriteStaging", "s3:AbortMultipartUpload"),
    ("driver", "S3WriteOutputs", "s3:AbortMultipartUpload"),
}  # fmt: skip


def test_every_other_grant_was_used(stack):
    """Run last: every granted action outside :data:`EXPECTED_UNUSED` served a request of the tests above, so
    the policies hold nothing the serverless path does not need (IAM Access Analyzer's unused permissions)."""
    assert unused_grants(stack.policies, stack.keys, stack.audit) == EXPECTED_UNUSED


def _normalized(documents: dict[str, dict[str, Any]]) -> dict[str, dict]:
    """Sid → statement with sorted actions, resources and condition values (IAM ignores their order)."""
    out = {}
    for document in documents.values():
        for st in document["Statement"]:
            resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
            actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
            conditions = {op: {k: sorted(v if isinstance(v, list) else [v]) for k, v in keys.items()}
                          for op, keys in st.get("Condition", {}).items()}  # fmt: skip
            out[st["Sid"]] = {"Effect": st["Effect"], "Action": sorted(actions), "Resource": sorted(resources),
                              "Condition": conditions}  # fmt: skip
    return out


def test_terraform_grants_exactly_what_was_enforced(stack, tmp_path):
    """The Terraform module's policy documents, evaluated by ``terraform console`` for the same bucket, function
    names and output prefix, equal the CDK documents the enforcement above ran with (so it proves both)."""
    exe = shutil.which("terraform")
    if exe is None:
        pytest.skip("no terraform binary")
    terraform_module_stub(tmp_path, BUCKET)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "TF_CLI_CONFIG_FILE": "/dev/null", "HOME": str(tmp_path)}
    init = subprocess.run([exe, "init", "-input=false", "-no-color"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=env)  # fmt: skip
    assert init.returncode == 0, init.stdout + init.stderr

    def console(expression: str, **variables: object) -> tuple[object, str]:
        (tmp_path / "vars.tfvars.json").write_text(json.dumps(variables))
        proc = subprocess.run([exe, "console", "-no-color", "-var-file=vars.tfvars.json"], cwd=tmp_path,
                              input=f"jsonencode({expression})\n", capture_output=True, text=True, timeout=60,
                              env=env)  # fmt: skip
        if proc.returncode != 0 or "Error:" in proc.stderr:
            return None, proc.stdout + proc.stderr
        return json.loads(json.loads(proc.stdout.strip())), proc.stderr

    tf = terraform_policies(console, function_name_prefix="squall", output_prefixes=[OUTPUT_PREFIX])
    for role in ("worker", "driver", "api"):
        assert _normalized({"tf": tf[role]}) == _normalized(stack.policies[role]), role
