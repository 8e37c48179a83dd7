"""An IAM-enforcing AWS on loopback for the least-privilege test: moto's server (:mod:`.iam_moto`), an
administrator, and one IAM user per Squall function holding exactly its role's policy documents.

Policy documents come from the synthesized CDK template (:func:`cdk_policies`: the role policies' statements
with the CloudFormation intrinsics resolved to the test's bucket names and ARNs) or from the Terraform module
(:func:`terraform_policies`).
"""

from __future__ import annotations

import fnmatch
import io
import json
import os
import socket
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .helpers import REPO, as_list, function_by_handler, resources_of

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's account
#: requests the server lets through unauthenticated: creating the administrator
SETUP_REQUESTS = 3


@dataclass
class Keys:
    """One IAM user's access key, as the environment of the process that uses it."""

    user: str
    access_key_id: str
    secret: str

    @property
    def env(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": self.access_key_id, "AWS_SECRET_ACCESS_KEY": self.secret}


@dataclass
class IamMoto:
    """The running server, its administrator and the users made so far."""

    endpoint_url: str
    proc: subprocess.Popen[bytes]
    admin: Keys | None = None
    users: dict[str, Keys] = field(default_factory=dict)

    def client(self, service: str, keys: Keys | None = None) -> Any:
        """A boto3 client signed with ``keys`` (default: the administrator's)."""
        import boto3

        keys = keys or self.admin
        assert keys is not None
        return boto3.session.Session().client(
            service, endpoint_url=self.endpoint_url, region_name=REGION,
            aws_access_key_id=keys.access_key_id, aws_secret_access_key=keys.secret,
        )  # fmt: skip

    def env(self, keys: Keys) -> dict[str, str]:
        """The environment of a process acting as ``keys``'s user against this server."""
        return {"AWS_ENDPOINT_URL": self.endpoint_url, "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION,
                **keys.env}  # fmt: skip

    def user(self, name: str, policies: dict[str, dict[str, Any]]) -> Keys:
        """An IAM user with exactly ``policies`` (name -> document) as inline policies, and its access key."""
        iam = self.client("iam")
        iam.create_user(UserName=name)
        for policy_name, document in policies.items():
            iam.put_user_policy(UserName=name, PolicyName=policy_name, PolicyDocument=json.dumps(document))
        key = iam.create_access_key(UserName=name)["AccessKey"]
        self.users[name] = Keys(name, key["AccessKeyId"], key["SecretAccessKey"])
        return self.users[name]

    def function(self, name: str) -> None:
        """A Lambda function in moto (no code runs there: it is what DryRun invocations are checked against)."""
        iam = self.client("iam")
        role = iam.create_role(RoleName=f"{name}-role", AssumeRolePolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                   "Principal": {"Service": "lambda.amazonaws.com"}}]}))  # fmt: skip
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("index.py", "def handler(event, context):\n    return None\n")
        self.client("lambda").create_function(
            FunctionName=name, Runtime="python3.12", Role=role["Role"]["Arn"], Handler="index.handler",
            Code={"ZipFile": buf.getvalue()},
        )  # fmt: skip

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def start_iam_moto(log: Path, audit: Path | None = None) -> IamMoto:
    """Start :mod:`.iam_moto` on a free loopback port and create the administrator (``Action: *``); ``audit``:
    where the server records the requests it granted (JSON lines, see :func:`unused_grants`)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT=str(SETUP_REQUESTS))
    if audit is not None:
        env["IAM_MOTO_AUDIT"] = str(audit)
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tests.infra.iam_moto", str(port)], cwd=REPO, env=env,
                                stdout=out, stderr=out)  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto's server did not start: see {log}") from None
            time.sleep(0.05)
    server = IamMoto(f"http://127.0.0.1:{port}", proc)
    nobody = Keys("setup", "AKIASETUPSETUPSETUP0", "setup")
    iam = server.client("iam", nobody)  # the SETUP_REQUESTS unauthenticated requests
    iam.create_user(UserName="admin")
    iam.put_user_policy(UserName="admin", PolicyName="admin", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))  # fmt: skip
    key = iam.create_access_key(UserName="admin")["AccessKey"]
    server.admin = Keys("admin", key["AccessKeyId"], key["SecretAccessKey"])
    return server


# ------------------------------------------------------------------------------------- CloudFormation


def resolve(value: Any, refs: dict[str, str], attrs: dict[tuple[str, str], str]) -> Any:
    """CloudFormation intrinsics → values: ``Ref`` (pseudo parameters and resources in ``refs``),
    ``Fn::GetAtt`` (``attrs``), ``Fn::Join``, ``Fn::Sub`` (``${Name}``/``${Res.Attr}``). Anything else unresolved
    is an error, so a policy cannot silently keep an intrinsic."""
    if isinstance(value, list):
        return [resolve(v, refs, attrs) for v in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"Ref"}:
        return refs[value["Ref"]]
    if set(value) == {"Fn::GetAtt"}:
        res, attr = value["Fn::GetAtt"]
        return attrs[(res, attr)]
    if set(value) == {"Fn::Join"}:
        sep, parts = value["Fn::Join"]
        return sep.join(str(resolve(p, refs, attrs)) for p in parts)
    if set(value) == {"Fn::Sub"}:
        text = value["Fn::Sub"]
        assert isinstance(text, str), value
        for name, got in refs.items():
            text = text.replace(f"${{{name}}}", got)
        for (res, attr), got in attrs.items():
            text = text.replace(f"${{{res}.{attr}}}", got)
        assert "${" not in text, text
        return text
    assert not any(k.startswith("Fn::") for k in value), value
    return {k: resolve(v, refs, attrs) for k, v in value.items()}


def cdk_policies(template: dict[str, Any], bucket: str) -> dict[str, dict[str, dict[str, Any]]]:
    """Function role → {policy name: resolved policy document} of the synthesized template's IAM policies
    attached to that function's role; the stack's bucket is ``bucket``, the account and region moto's."""
    refs = {"AWS::Partition": "aws", "AWS::Region": REGION, "AWS::AccountId": ACCOUNT, "AWS::URLSuffix":
            "amazonaws.com"}  # fmt: skip
    attrs: dict[tuple[str, str], str] = {}
    for logical_id in resources_of(template, "AWS::S3::Bucket"):
        refs[logical_id] = bucket
        attrs[(logical_id, "Arn")] = f"arn:aws:s3:::{bucket}"
    for logical_id, res in resources_of(template, "AWS::Logs::LogGroup").items():
        name = res["Properties"].get("LogGroupName", f"/aws/apigateway/{logical_id}")
        refs[logical_id] = name
        attrs[(logical_id, "Arn")] = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{name}:*"
    for logical_id, res in resources_of(template, "AWS::Lambda::Function").items():
        name = res["Properties"]["FunctionName"]
        refs[logical_id] = name
        attrs[(logical_id, "Arn")] = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{name}"
    role_ids = {role: props["Role"]["Fn::GetAtt"][0] for role, props in function_by_handler(template).items()}
    out: dict[str, dict[str, dict[str, Any]]] = {role: {} for role in role_ids}
    for logical_id, res in resources_of(template, "AWS::IAM::Policy").items():
        attached = [r["Ref"] for r in res["Properties"]["Roles"]]
        for role, role_id in role_ids.items():
            if role_id in attached:
                out[role][logical_id] = resolve(res["Properties"]["PolicyDocument"], refs, attrs)
    for role, role_id in role_ids.items():  # inline policies of the role itself, and no managed ones
        props = template["Resources"][role_id]["Properties"]
        assert not props.get("ManagedPolicyArns"), role
        for policy in props.get("Policies", []):
            out[role][policy["PolicyName"]] = resolve(policy["PolicyDocument"], refs, attrs)
    return out


def _matches(pattern: str, value: str) -> bool:
    return fnmatch.fnmatchcase(value, pattern)


def unused_grants(policies: dict[str, dict[str, dict[str, Any]]], keys: dict[str, Keys], audit: Path
                  ) -> set[tuple[str, str, str]]:  # fmt: skip
    """(role, Sid, action) of every granted action no recorded request of that role used (IAM Access
    Analyzer's "unused permissions", on the requests of this test)."""
    by_key = {k.access_key_id: role for role, k in keys.items()}
    used: dict[str, list[dict[str, Any]]] = {role: [] for role in keys}
    if audit.exists():
        for line in audit.read_text().splitlines():
            request = json.loads(line)
            if request["key"] in by_key:
                used[by_key[request["key"]]].append(request)
    unused = set()
    for role, documents in policies.items():
        for document in documents.values():
            for st in document["Statement"]:
                actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
                resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
                for action in actions:
                    if not any(r["action"] == action and any(_matches(p, r["resource"]) for p in resources)
                               for r in used[role]):  # fmt: skip
                        unused.add((role, st.get("Sid", "?"), action))
    return unused


# ------------------------------------------------------------------------------------------ Terraform

#: main.tf locals the policy documents use, evaluated as they are (data sources replaced by moto's values)
_TF_LOCALS = ("prefix", "bucket_arn", "data_locations", "data_object_arns", "function_names", "function_arns",
              "exchange_prefix", "results_prefix", "queries_prefix")  # fmt: skip
_TF_DATA = {
    "data.aws_partition.current.partition": '"aws"',
    "data.aws_region.current.name": f'"{REGION}"',
    "data.aws_caller_identity.current.account_id": f'"{ACCOUNT}"',
}


def _hcl(value: Any) -> str:
    """A value of python-hcl2's output as HCL source: ``"${expr}"`` → ``expr``, other strings → templates."""
    if isinstance(value, list):
        return "[" + ", ".join(_hcl(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_hcl(v)}" for k, v in value.items()) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    text = str(value)
    if text.startswith("${") and text.endswith("}") and text.count("${") == 1:
        return text[2:-1]
    return '"' + text + '"'


def _loop(var: str, for_each: str, body: str) -> str:
    """``dynamic "var" { for_each … content { body } }`` as a for expression (``var.key``/``var.value``)."""
    return f"[for {var} in [for k, v in {_hcl(for_each)} : {{key = k, value = v}}] : {body}]"


def _tf_statement(st: dict[str, Any]) -> str:
    conditions = [f"[{{test = {_hcl(c['test'])}, variable = {_hcl(c['variable'])}, values = {_hcl(c['values'])}}}]"
                  for c in st.get("condition", [])]  # fmt: skip
    for dyn in st.get("dynamic", []):
        for block in as_list(dyn["condition"]):
            for content in as_list(block["content"]):
                conditions.append(_loop("condition", block["for_each"], _tf_statement_condition(content)))
    return (f"{{Sid = {_hcl(st['sid'])}, Action = {_hcl(st['actions'])}, Resource = {_hcl(st['resources'])}, "
            f"conditions = concat({', '.join(conditions) or '[]'}, [])}}")  # fmt: skip


def _tf_statement_condition(c: dict[str, Any]) -> str:
    return f"{{test = {_hcl(c['test'])}, variable = {_hcl(c['variable'])}, values = {_hcl(c['values'])}}}"


def terraform_policy_expression(role: str) -> str:
    """The ``aws_iam_policy_document`` of ``role`` in ``iam.tf`` as one Terraform expression (a list of
    statements with ``conditions`` as a list), to evaluate with ``terraform console``."""
    from .helpers import terraform

    document = terraform()["data"]["aws_iam_policy_document"][role]
    parts = ["[" + ", ".join(_tf_statement(st) for st in document.get("statement", [])) + "]"]
    for dyn in document.get("dynamic", []):
        for block in as_list(dyn["statement"]):
            for content in as_list(block["content"]):
                parts.append(_loop("statement", block["for_each"], _tf_statement(content)))
    expression = f"concat({', '.join(parts)})"
    for role_name in ("worker", "driver", "api"):
        expression = expression.replace(
            f'aws_cloudwatch_log_group.fn["{role_name}"].arn', f'local.log_group_arns["{role_name}"]'
        )
    return expression


def terraform_module_stub(root: Path, bucket: str) -> None:
    """A provider-free module in ``root``: ``variables.tf``, ``writes.tf`` and the locals the policies use
    (``main.tf``'s expressions, the bucket ``bucket``, moto's account and region)."""
    from .helpers import TF_DIR, terraform

    for name in ("variables.tf", "writes.tf"):
        (root / name).write_text((TF_DIR / name).read_text())
    main = terraform()["locals"]
    lines = []
    for name in _TF_LOCALS:
        expression = _hcl(main[name])
        for ref, value in _TF_DATA.items():
            expression = expression.replace(ref, value)
        lines.append(f"  {name} = {expression}")
    lines += ['  partition = "aws"', f'  bucket_name = "{bucket}"',
              '  log_group_arns = {for role, name in local.function_names : role => '
              f'"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/lambda/${{name}}"}}']  # fmt: skip
    (root / "stub.tf").write_text("locals {\n" + "\n".join(lines) + "\n}\n")


def terraform_policies(console: Any, **variables: Any) -> dict[str, dict[str, Any]]:
    """Role → the Terraform module's policy document (JSON, conditions in IAM's shape), evaluated by
    ``console(expression, **variables)`` in the module :func:`terraform_module_stub` wrote."""
    out = {}
    for role in ("worker", "driver", "api"):
        value, err = console(terraform_policy_expression(role), **variables)
        assert value is not None, err
        statements = []
        for st in value:
            doc: dict[str, Any] = {"Sid": st["Sid"], "Effect": "Allow", "Action": st["Action"],
                                   "Resource": st["Resource"]}  # fmt: skip
            for c in st["conditions"]:
                doc.setdefault("Condition", {}).setdefault(c["test"], {})[c["variable"]] = c["values"]
            statements.append(doc)
        out[role] = {"Version": "2012-10-17", "Statement": statements}
    return out
