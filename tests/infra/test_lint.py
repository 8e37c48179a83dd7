"""Static analysis of the synthesized template and the Terraform module: cfn-lint and checkov.

Every skipped rule is listed here with its reason (also in infra/README.md). checkov lives in its own
venv (``make checkov-venv``: it pins old boto3/networkx/packaging that conflict with the project's);
the test finds it there, in ``$SQUALL_CHECKOV`` or on PATH, and is skipped without it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import TF_DIR, checkov_binary

#: cfn-lint rules ignored, with the reason.
CFN_LINT_IGNORED = {
    "W3005": "CDK adds an explicit DependsOn on the role's default policy next to the GetAtt on the role "
    "(needed so the policy exists before the function runs); redundant but harmless",
}

#: checkov checks skipped (both frameworks), with the reason. Everything else must pass.
CHECKOV_SKIPPED = {
    # S3
    "CKV_AWS_18": "no server access logging: a second log bucket for transient exchange/result objects; "
    "use CloudTrail data events account-wide if needed",
    "CKV_AWS_21": "no versioning: exchange/results objects are write-once (If-None-Match) and short-lived; "
    "versions would keep every expired object as noncurrent",
    "CKV_AWS_144": "no cross-region replication: the bucket holds temporary data; data/ is the user's copy",
    "CKV_AWS_145": "SSE-S3, not SSE-KMS: the exchange does thousands of GET/PUT per query and KMS would "
    "add per-request cost and request-rate quotas",
    "CKV2_AWS_62": "no event notifications: nothing consumes them",
    # Lambda
    "CKV_AWS_116": "no DLQ: the driver tracks workers through S3 and retries itself; async retries are off",
    "CKV_AWS_117": "no VPC: functions only call S3 and Lambda APIs; a VPC needs NAT/endpoints, adds cost "
    "and cold-start time without protecting anything",
    "CKV_AWS_115": "reserved concurrency is a parameter (reservedConcurrency), off by default: reserving on a "
    "new account with a low concurrency quota makes the deployment fail",
    "CKV_AWS_173": "environment variables hold no secrets (bucket and function names); Lambda encrypts "
    "them at rest with its service key",
    "CKV_AWS_272": "no code signing: the code is built on the deployer's machine, not by a signing pipeline",
    # CloudWatch Logs
    "CKV_AWS_158": "log groups use CloudWatch's default encryption; a KMS key costs money per month",
    "CKV_AWS_338": "retention is a parameter (logRetentionDays, default 30 days) to keep costs low",
    # API Gateway
    "CKV_AWS_73": "X-Ray is a parameter (tracing), off by default for cost",
    "CKV_AWS_120": "no API caching: responses are per query and change while it runs; a cache cluster "
    "costs per hour",
    "CKV_AWS_225": "same as CKV_AWS_120 for method settings",
    "CKV2_AWS_29": "no WAF: the API requires SigV4 (or an API key) and is throttled; a web ACL costs monthly",
    "CKV2_AWS_51": "no client certificates: clients authenticate with SigV4; mTLS needs a custom domain",
    "CKV2_AWS_53": "no API Gateway request validation: proxy integration; the API function validates "
    "bodies (Powertools, 422 on bad input)",
}


def test_cfn_lint(default, alt):
    pytest.importorskip("cfnlint")
    exe = shutil.which("cfn-lint", path=str(Path(sys.executable).parent)) or shutil.which("cfn-lint")
    assert exe, "cfn-lint is in the infra extra"
    cmd = [exe, "--ignore-checks", *CFN_LINT_IGNORED, "--", str(default.path), str(alt.path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_checkov(default, alt):
    """checkov on the Terraform module and on both synthesized templates (two runs in parallel)."""
    exe = checkov_binary()
    if exe is None:
        pytest.skip("checkov not installed: `make checkov-venv`")
    common = [
        "--skip-check",
        ",".join(CHECKOV_SKIPPED),
        "--skip-download",
        "--compact",
        "--quiet",
        "-o",
        "json",
    ]
    runs = {
        "terraform": ["--directory", str(TF_DIR), "--framework", "terraform"],
        "cloudformation": [
            "--file",
            str(default.path),
            "--file",
            str(alt.path),
            "--framework",
            "cloudformation",
        ],
    }
    procs = {
        kind: subprocess.Popen(
            [exe, *args, *common], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for kind, args in runs.items()
    }
    failed = []
    for kind, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert out.strip(), f"{kind}: no output\n{err}"
        reports = json.loads(out)
        reports = reports if isinstance(reports, list) else [reports]
        (report,) = [r for r in reports if r.get("check_type") == kind]
        summary = report["summary"]
        assert summary["parsing_errors"] == 0 and summary["passed"] > 20, f"{kind}: {summary}"
        failed += [
            f"{kind}: {c['check_id']} {c['check_name']} ({c['resource']})"
            for c in report.get("results", {}).get("failed_checks", [])
        ]
    assert not failed, "\n".join(failed)


def test_readme_lists_every_skipped_rule():
    readme = (TF_DIR.parent / "README.md").read_text()
    for rule in (*CFN_LINT_IGNORED, *CHECKOV_SKIPPED):
        assert rule in readme, rule
