"""moto's server with IAM enforcement, closer to AWS where moto's own checks are too coarse.

``python -m tests.infra.iam_moto PORT`` runs moto's server on ``127.0.0.1:PORT`` with
``INITIAL_NO_AUTH_ACTION_COUNT`` from the environment (set it: the first N requests run unauthenticated,
enough to create an administrator; every later request is signed, checked against the caller's IAM
policies, and refused with AccessDenied outside them). These corrections make moto judge like IAM:

- **conditions**: moto ignores ``StringLike`` and treats a failed condition of an *Allow* statement as an
  explicit deny before even comparing the resource. Here a statement applies when action, resource and
  conditions all match (``StringLike``/``StringEquals`` on ``s3:prefix``, which S3's ListBucket passes from
  the ``prefix`` parameter; an absent key fails the condition, as on AWS); Deny wins, then Allow.
- **HeadBucket** is authorized as ``s3:ListBucket`` without ``s3:prefix``, as on AWS (moto asks for an
  ``s3:HeadBucket`` action that does not exist in IAM).
- **S3 action names**: moto 5.2.6 began to authorize S3 requests under their API operation's name
  (``s3:ListObjectsV2``, ``s3:HeadObject``); here under the IAM action moto's own map gives (``s3:ListBucket``,
  ``s3:GetObject``), as before and as on AWS.
- **DeleteObjects**: moto authorizes the batch on the bucket ARN and then denies every key; AWS checks
  ``s3:DeleteObject`` per key.
- **lambda:InvokeFunction**: moto authorizes Lambda calls on resource ``*``; here on the function's ARN
  (so a policy naming one function allows only that one). Invocations run no code (``use_docker`` off): a
  ``DryRun`` invoke is the authorization check the local Lambda emulator asks for.

With ``IAM_MOTO_AUDIT=FILE`` every granted request is appended to FILE as a JSON line (access key, IAM action,
resource, condition keys): what the test compares with the grants to find permissions nothing used.
"""

from __future__ import annotations

import contextvars
import fnmatch
import json
import os
import re
import sys
import threading
from typing import Any
from urllib.parse import unquote

#: the condition keys of the request being authorized (S3 ListBucket: ``s3:prefix``)
_REQUEST_CONDITIONS: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "request_conditions", default=None
)


def _condition_holds(conditions: dict[str, Any], values: dict[str, str]) -> bool:
    for operator, keys in conditions.items():
        for key, expected in keys.items():
            patterns = expected if isinstance(expected, list) else [expected]
            actual = values.get(key)
            if actual is None:
                return False
            if operator == "StringLike":
                if not any(fnmatch.fnmatchcase(actual, p) for p in patterns):
                    return False
            elif operator == "StringEquals":
                if actual not in patterns:
                    return False
            else:
                raise NotImplementedError(f"condition operator {operator} is not evaluated here")
    return True


def _patch() -> None:
    from moto.core import config as moto_config
    from moto.iam import access_control as ac
    from moto.s3 import responses as s3r

    moto_config.default_user_config["lambda"]["use_docker"] = False
    original = ac.IAMPolicyStatement.is_action_permitted

    def is_action_permitted(
        self: Any, action: str, resource: str = "*", principal: Any = None, incoming: Any = None
    ) -> Any:
        if principal is not None or incoming is not None:  # trust policies: moto's own logic
            return original(self, action, resource, principal, incoming)
        st = self._statement
        if "NotAction" in st:
            concerned = not self._check_element_matches("NotAction", action)
        else:
            concerned = self._check_element_matches("Action", action)
        if not concerned or not self._check_element_matches("Resource", resource):
            return ac.PermissionResult.NEUTRAL
        if "Condition" in st and not _condition_holds(st["Condition"], _REQUEST_CONDITIONS.get() or {}):
            return ac.PermissionResult.NEUTRAL
        return ac.PermissionResult.PERMITTED if st["Effect"] == "Allow" else ac.PermissionResult.DENIED

    ac.IAMPolicyStatement.is_action_permitted = is_action_permitted

    authorize_s3 = s3r.S3Response._authenticate_and_authorize_s3_action

    def authorize_with_prefix(self: Any, bucket_name: str | None = None, key_name: str | None = None) -> None:
        values: dict[str, str] = {}
        if self.data.get("Action") == "HeadBucket":  # IAM authorizes HeadBucket as s3:ListBucket (no prefix)
            self.data["Action"] = "ListBucket"
        elif self.data.get("Action") == "ListBucket" and key_name is None:
            prefix = (self.querystring.get("prefix") or [None])[0]
            if prefix is not None:
                values["s3:prefix"] = prefix
        token = _REQUEST_CONDITIONS.set(values)
        # moto >= 5.2.6 names the action it authorizes after the API operation (s3:ListObjectsV2,
        # s3:HeadObject); IAM's are the names moto still puts in ``data["Action"]`` (s3:ListBucket, s3:GetObject)
        if self.data.get("Action"):
            self._get_action = lambda: self.data["Action"]
        try:
            authorize_s3(self, bucket_name=bucket_name, key_name=key_name)
        finally:
            _REQUEST_CONDITIONS.reset(token)
            self.__dict__.pop("_get_action", None)

    s3r.S3Response._authenticate_and_authorize_s3_action = authorize_with_prefix
    s3r.S3Response._bucket_response_delete_keys = _delete_keys_per_key

    from moto.awslambda.responses import LambdaResponse

    def lambda_resource(self: Any) -> str:
        m = re.search(r"/functions/([^/]+)", unquote(self.path))
        if not m:
            return "*"
        name = m.group(1)
        if name.startswith("arn:"):
            return name
        return f"arn:aws:lambda:{self.region}:{self.current_account}:function:{name}"

    LambdaResponse._determine_resource = lambda_resource  # type: ignore[attr-defined]

    init = ac.IAMRequestBase.__init__

    def init_with_iam_action(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if self._action in ("lambda:Invoke", "lambda:InvokeAsync"):  # the operation, not the IAM action
            self._action = "lambda:InvokeFunction"

    ac.IAMRequestBase.__init__ = init_with_iam_action

    audit = os.environ.get("IAM_MOTO_AUDIT")
    if audit:
        check = ac.IAMRequestBase.check_action_permitted
        lock = threading.Lock()

        def check_and_record(self: Any, resource: str) -> None:
            check(self, resource)  # raises when denied: only granted requests are recorded
            key = self._get_string_between("Credential=", "/", self._headers["Authorization"])
            line = json.dumps({"key": key, "action": self._action, "resource": resource,
                               "conditions": _REQUEST_CONDITIONS.get() or {}})  # fmt: skip
            with lock, open(audit, "a") as out:
                out.write(line + "\n")

        ac.IAMRequestBase.check_action_permitted = check_and_record


def _delete_keys_per_key(self: Any, bucket_name: str, authenticated: bool = True) -> Any:
    """DeleteObjects with ``s3:DeleteObject`` checked per key (moto checks the bucket once)."""
    import xmltodict
    from moto.core.common_types import TYPE_RESPONSE  # noqa: F401
    from moto.core.responses import ActionResult
    from moto.s3.exceptions import BucketAccessDeniedError, S3AccessDeniedError

    objects = xmltodict.parse(self.body, strip_whitespace=False)["Delete"].get("Object", [])
    objects = objects if isinstance(objects, list) else [objects]
    allowed, errors = [], []
    for obj in objects:
        self.data["Action"] = "DeleteObject"
        try:
            self._authenticate_and_authorize_s3_action(bucket_name=bucket_name, key_name=obj["Key"])
            allowed.append(obj)
        except (BucketAccessDeniedError, S3AccessDeniedError):
            errors.append({"Key": obj["Key"], "Code": "AccessDenied", "Message": "Access Denied"})
    deleted = self.backend.delete_objects(bucket_name, allowed, False)[0] if allowed else []
    self.data["Action"] = "DeleteObjects"
    done = [{"Key": k, "VersionId": v or None} for k, v, _dv in deleted]
    return self.serialized(ActionResult({"Deleted": done, "Errors": errors}))


def main(argv: list[str]) -> int:
    """Run the server on 127.0.0.1:``argv[0]`` until killed."""
    _patch()
    from moto.server import main as moto_main

    moto_main(["-H", "127.0.0.1", "-p", argv[0]])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
