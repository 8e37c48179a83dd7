"""Shared helpers of the infra tests: template rendering, Terraform parsing, tool lookup."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CDK_DIR = REPO / "infra" / "cdk"
TF_DIR = REPO / "infra" / "terraform"
LAYER_SCRIPT = REPO / "infra" / "layer" / "build_layer.py"
ROLES = ("worker", "driver", "api")


# ------------------------------------------------------------------------------------- CloudFormation


def render(value: Any) -> Any:
    """Flatten CloudFormation intrinsics into readable strings.

    ``{"Ref": "X"}`` -> ``"${X}"``, ``{"Fn::GetAtt": ["X", "Arn"]}`` -> ``"${X.Arn}"``,
    ``Fn::Join`` is joined, ``Fn::Sub`` keeps its template. Lists and dicts are rendered recursively.
    """
    if isinstance(value, list):
        return [render(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {"Ref"}:
            return f"${{{value['Ref']}}}"
        if set(value) == {"Fn::GetAtt"}:
            return "${" + ".".join(value["Fn::GetAtt"]) + "}"
        if set(value) == {"Fn::Join"}:
            sep, parts = value["Fn::Join"]
            return sep.join(str(render(p)) for p in parts)
        if set(value) == {"Fn::Sub"}:
            sub = value["Fn::Sub"]
            return sub if isinstance(sub, str) else sub[0]
        return {k: render(v) for k, v in value.items()}
    return value


def as_list(value: Any) -> list[Any]:
    """A scalar or list as a list."""
    return value if isinstance(value, list) else [value]


def resources_of(template: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    """Logical id -> resource, for one resource type."""
    return {k: r for k, r in template["Resources"].items() if r["Type"] == type_}


def function_by_handler(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Role (worker/driver/api) -> Lambda function properties, found by handler name."""
    out = {}
    for res in resources_of(template, "AWS::Lambda::Function").values():
        props = res["Properties"]
        role = props["Handler"].removeprefix("squall.functions.").removesuffix(".handler")
        out[role] = props
    return out


def role_statements(template: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Function role (worker/driver/api) -> rendered Allow statements of the policies on its IAM role."""
    functions = function_by_handler(template)
    role_ids = {fn_role: props["Role"]["Fn::GetAtt"][0] for fn_role, props in functions.items()}
    out: dict[str, list[dict[str, Any]]] = {r: [] for r in role_ids}
    for res in resources_of(template, "AWS::IAM::Policy").values():
        attached = [r["Ref"] for r in res["Properties"]["Roles"]]
        for fn_role, role_id in role_ids.items():
            if role_id in attached:
                out[fn_role] += render(res["Properties"]["PolicyDocument"]["Statement"])
    return out


def all_allow_statements(template: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every identity-policy Allow statement in the template (inline role policies and IAM::Policy)."""
    for logical_id, res in template["Resources"].items():
        docs = []
        if res["Type"] == "AWS::IAM::Policy":
            docs.append(res["Properties"]["PolicyDocument"])
        if res["Type"] == "AWS::IAM::Role":
            docs += [p["PolicyDocument"] for p in res["Properties"].get("Policies", [])]
        for doc in docs:
            for st in render(doc["Statement"]):
                if st.get("Effect") == "Allow":
                    yield logical_id, st


# ------------------------------------------------------------------------------------------ Terraform


@cache
def terraform() -> dict[str, Any]:
    """All ``infra/terraform/*.tf`` files parsed with python-hcl2 and merged by top-level key.

    Strings come back without their HCL quotes; ``resource``/``data`` become
    ``{type: {name: body}}`` and ``variable``/``output`` ``{name: body}``.
    """
    import hcl2
    from hcl2.utils import SerializationOptions

    options = SerializationOptions(with_comments=False, explicit_blocks=False, strip_string_quotes=True)
    merged: dict[str, Any] = {"resource": {}, "data": {}, "variable": {}, "output": {}, "locals": {}}
    for path in sorted(TF_DIR.glob("*.tf")):
        with open(path) as fh:
            doc = hcl2.load(fh, serialization_options=options)
        for kind in ("resource", "data"):
            for block in doc.get(kind, []):
                for type_, named in block.items():
                    merged[kind].setdefault(type_, {}).update(named)
        for kind in ("variable", "output"):
            for block in doc.get(kind, []):
                merged[kind].update(block)
        for block in doc.get("locals", []):
            merged["locals"].update(block)
    return merged


def tf_default(name: str) -> Any:
    """Default of a Terraform variable (``None`` for ``null``)."""
    value = terraform()["variable"][name].get("default")
    return None if value in ("${null}", "null") else value


def tf_resolve(value: Any) -> Any:
    """Resolve the simple expressions the module uses to their default values.

    ``${var.x}``, ``${tostring(var.x)}`` and ``${var.tracing ? "false" : "true"}`` become the
    variable's default; anything else is returned unchanged.
    """
    if not isinstance(value, str):
        return value
    if m := re.fullmatch(r"\$\{var\.(\w+)\}", value):
        return tf_default(m.group(1))
    if m := re.fullmatch(r"\$\{tostring\(var\.(\w+)\)\}", value):
        return str(tf_default(m.group(1)))
    if m := re.fullmatch(r'\$\{var\.(\w+) \? "(\w*)" : "(\w*)"\}', value):
        return m.group(2) if tf_default(m.group(1)) else m.group(3)
    return value


# -------------------------------------------------------------------------------------------- tools


def checkov_binary() -> str | None:
    """checkov from ``$SQUALL_CHECKOV``, the Makefile's venv (``make checkov-venv``) or ``PATH``."""
    for cand in (os.environ.get("SQUALL_CHECKOV"), str(REPO / "build" / "checkov-venv" / "bin" / "checkov")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return shutil.which("checkov")


def camel(name: str) -> str:
    """snake_case -> camelCase."""
    head, *rest = name.split("_")
    return head + "".join(p.capitalize() for p in rest)


def pascal(name: str) -> str:
    """snake_case -> PascalCase."""
    return "".join(p.capitalize() for p in name.split("_"))


def dump(obj: Any) -> str:
    """Compact JSON for assertion messages."""
    return json.dumps(obj, sort_keys=True, default=str)[:2000]
