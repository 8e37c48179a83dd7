"""Build the CDK app: read the configuration, stage the assets, define the stack."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aws_cdk as cdk

from squall_infra.config import ConfigError, SquallConfig
from squall_infra.stack import SquallStack
from squall_infra.staging import REPO, placeholder_layer, stage_function_code

CDK_DIR = Path(__file__).resolve().parents[1]
#: No Docker bundling anywhere: the assets are staged by :mod:`squall_infra.staging` before synthesis.
OFFLINE_CONTEXT: dict[str, Any] = {"aws:cdk:bundling-stacks": []}


def cdk_json_context(path: Path = CDK_DIR / "cdk.json") -> dict[str, Any]:
    """The ``context`` section of ``cdk.json`` (the CDK CLI merges it itself; direct runs need this)."""
    return dict(json.loads(path.read_text()).get("context", {}))


def environment_from_os() -> cdk.Environment:
    """Account and region of the deployment: the CDK CLI sets ``CDK_DEFAULT_*`` from the credentials.

    Without them (offline synthesis) the stack is environment-agnostic and uses ``AWS::Region`` and
    ``AWS::AccountId`` at deploy time.
    """
    region = (
        os.environ.get("CDK_DEFAULT_REGION")
        or os.environ.get("AWS_REGION")
        or os.environ.get("AWS_DEFAULT_REGION")
    )
    return cdk.Environment(account=os.environ.get("CDK_DEFAULT_ACCOUNT"), region=region)


def resolve_layer(config: SquallConfig, staging_root: Path) -> Path:
    """The layer asset to use: the configured path, ``build/layer-<arch>.zip`` (or folder), or a placeholder."""
    if config.layer_path == "placeholder":
        return placeholder_layer(staging_root / "layer-placeholder")
    if config.layer_path:
        path = Path(config.layer_path)
        path = path if path.is_absolute() else REPO / path
        if not path.exists():
            raise ConfigError(f"layerPath {path} does not exist")
        return path
    for candidate in (
        REPO / "build" / f"layer-{config.architecture}.zip",
        REPO / "build" / f"layer-{config.architecture}",
    ):
        if candidate.exists():
            return candidate
    raise ConfigError(
        f"no dependency layer for {config.architecture}: run `make layer ARCH={config.architecture}` "
        "(or synthesize with -c layerPath=placeholder, which cannot run queries)"
    )


def build_app(
    context: Mapping[str, Any] | None = None,
    *,
    outdir: str | None = None,
    staging_root: Path = REPO / "build",
    env: cdk.Environment | None = None,
) -> tuple[cdk.App, SquallStack]:
    """Create the app and the stack. ``context`` overrides ``cdk.json``; the CDK CLI's context wins over both."""
    merged = {**OFFLINE_CONTEXT, **cdk_json_context(), **dict(context or {})}
    app = cdk.App(context=merged, outdir=outdir)
    config = SquallConfig.from_context(app.node.try_get_context)
    code_dir = stage_function_code(staging_root / "function-code")
    layer_path = resolve_layer(config, staging_root)
    stack = SquallStack(
        app,
        config.stack_name,
        config=config,
        code_dir=code_dir,
        layer_path=layer_path,
        env=env if env is not None else environment_from_os(),
        description="Squall: serverless SQL over Parquet (workers, driver, API on Lambda; S3 exchange)",
    )
    return app, stack
