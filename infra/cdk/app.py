#!/usr/bin/env python3
"""Squall's CDK app.

Run by the CDK CLI (``npx aws-cdk@2 deploy``, see ``cdk.json``) or directly for offline synthesis::

    python app.py [-c key=value ...] [--outdir cdk.out]     # what `make synth` does

Direct runs read ``cdk.json``'s context like the CLI does, need neither Docker nor AWS credentials,
and write the CloudFormation template to ``cdk.out/<stack>.template.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from squall_infra.app import build_app  # noqa: E402
from squall_infra.config import ConfigError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Synthesize the stack."""
    parser = argparse.ArgumentParser(description="Synthesize the Squall stack.")
    parser.add_argument("-c", "--context", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--outdir", default=None, help="default: cdk.out here (or CDK_OUTDIR from the CLI)")
    args = parser.parse_args(argv)
    context = {}
    for item in args.context:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"-c expects KEY=VALUE, got {item!r}")
        context[key] = value
    outdir = args.outdir or (None if "CDK_OUTDIR" in os.environ else str(HERE / "cdk.out"))
    try:
        app, stack = build_app(context, outdir=outdir)
    except ConfigError as exc:
        print(f"squall infra: {exc}", file=sys.stderr)
        return 2
    assembly = app.synth()
    template = Path(assembly.directory) / stack.template_file
    print(f"synthesized {stack.stack_name}: {template}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
