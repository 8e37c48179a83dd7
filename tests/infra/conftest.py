"""Fixtures of the infra tests: the CDK stack synthesized once per configuration and session."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .helpers import CDK_DIR

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
if str(CDK_DIR) not in sys.path:
    sys.path.insert(0, str(CDK_DIR))

#: A configuration that flips every switch away from its default.
ALT_CONTEXT = {
    "architecture": "x86_64",
    "authMode": "API_KEY",
    "bucketName": "my-squall-data",
    "tracing": "true",
    "reservedConcurrency": "100",
    "dataBuckets": "tpch-public/sf100,other-bucket",
    "logRetentionDays": "90",
    "functionNamePrefix": "sq",
    "workerMemoryMb": "10240",
    "timeoutSeconds": "600",
    "exchangeTtlDays": "2",
    "resultsTtlDays": "3",
    # another bucket's prefix, a prefix of Squall's own (existing) bucket, a whole bucket
    "outputPrefixes": "s3://lake-out/squall/,s3://my-squall-data/out/,s3://scratch-bucket/",
    "users": '{"alice": {"iam_principal": "arn:aws:iam::123456789012:user/alice", "max_running": 2}}',
}
#: Where :data:`ALT_CONTEXT` lets Squall write, as (bucket, key prefix).
ALT_OUTPUTS = (("lake-out", "squall/"), ("my-squall-data", "out/"), ("scratch-bucket", ""))


@dataclass
class Synth:
    """One synthesized stack: the construct, its template as a dict, and the file it was written to."""

    stack: Any
    template: dict[str, Any]
    path: Path

    @property
    def assertions(self) -> Any:
        """``aws_cdk.assertions.Template`` over the same template (no second synthesis)."""
        from aws_cdk.assertions import Template

        return Template.from_json(self.template)


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory):
    """``synth(**context)`` -> :class:`Synth`, cached per context for the session.

    Offline: the layer is a placeholder, no Docker bundling, no AWS environment.
    """
    cdk = pytest.importorskip("aws_cdk")
    from squall_infra.app import build_app

    cache: dict[str, Synth] = {}

    def _synth(**context: str) -> Synth:
        key = json.dumps(context, sort_keys=True)
        if key not in cache:
            root = tmp_path_factory.mktemp("cdk")
            app, stack = build_app(
                {"layerPath": "placeholder", **context},
                outdir=str(root / "cdk.out"),
                staging_root=root,
                env=cdk.Environment(),
            )
            path = Path(app.synth().directory) / stack.template_file
            cache[key] = Synth(stack=stack, template=json.loads(path.read_text()), path=path)
        return cache[key]

    return _synth


@pytest.fixture(scope="session")
def default(synth) -> Synth:
    """The stack with every parameter at its default."""
    return synth()


@pytest.fixture(scope="session")
def alt(synth) -> Synth:
    """The stack with :data:`ALT_CONTEXT`."""
    return synth(**ALT_CONTEXT)
