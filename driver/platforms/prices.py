"""What a query cost on AWS: Lambda GB-seconds and requests plus S3 requests, from a small price table.

Prices are AWS's public on-demand list prices in USD (checked Nov 2026; no free tier, no savings
plans). Lambda bills the duration of each invocation rounded up to 1 ms times its memory; arm64
(Graviton) is about 20 % cheaper per GB-second. S3 Standard bills PUT/COPY/POST/LIST in one tier and
GET/HEAD in another; DELETE is free. Unknown regions are priced as ``us-east-1`` and say so.

| region | Lambda x86_64 $/GB-s | Lambda arm64 $/GB-s | $/1M invocations | S3 PUT,LIST $/1k | S3 GET,HEAD $/1k |
|---|---|---|---|---|---|
| us-east-1, us-east-2, us-west-2, eu-west-1 | 0.0000166667 | 0.0000133334 | 0.20 | 0.005 | 0.0004 |
| eu-central-1 | 0.0000166667 | 0.0000133334 | 0.20 | 0.0054 | 0.00043 |
| ap-northeast-1 | 0.0000166667 | 0.0000133334 | 0.20 | 0.0047 | 0.00037 |
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Prices:
    gb_second_x86_64: float = 0.0000166667
    gb_second_arm64: float = 0.0000133334
    per_invocation: float = 0.20 / 1_000_000
    s3_put: float = 0.005 / 1000  # PUT, COPY, POST, LIST
    s3_get: float = 0.0004 / 1000  # GET, HEAD, other reads


PRICES: dict[str, Prices] = {
    "us-east-1": Prices(),
    "us-east-2": Prices(),
    "us-west-2": Prices(),
    "eu-west-1": Prices(),
    "eu-central-1": Prices(s3_put=0.0054 / 1000, s3_get=0.00043 / 1000),
    "ap-northeast-1": Prices(s3_put=0.0047 / 1000, s3_get=0.00037 / 1000),
}

PUT_CLASS = ("put", "list", "copy", "post", "create_multipart", "upload_part", "complete_multipart")
GET_CLASS = ("get", "head", "select")


def s3_request_classes(requests: Mapping[str, int]) -> tuple[int, int]:
    """(PUT-class, GET-class) request counts from counters by type; others (delete, local reads) are free."""
    puts = sum(n for kind, n in requests.items() if kind in PUT_CLASS)
    gets = sum(n for kind, n in requests.items() if kind in GET_CLASS)
    return puts, gets


def query_cost(
    billed_ms: Iterable[tuple[int, int]],
    invocations: int,
    s3_requests: Mapping[str, int],
    *,
    region: str = "us-east-1",
    architecture: str = "arm64",
) -> dict[str, Any]:
    """``cost_usd`` and its parts for invocations given as (billed ms, memory MB) pairs."""
    prices = PRICES.get(region, PRICES["us-east-1"])
    gb_s = sum(ms / 1000 * mb / 1024 for ms, mb in billed_ms)
    rate = prices.gb_second_arm64 if architecture == "arm64" else prices.gb_second_x86_64
    puts, gets = s3_request_classes(s3_requests)
    parts = {
        "lambda_compute_usd": gb_s * rate,
        "lambda_requests_usd": invocations * prices.per_invocation,
        "s3_put_usd": puts * prices.s3_put,
        "s3_get_usd": gets * prices.s3_get,
    }
    return {
        "cost_usd": sum(parts.values()),
        "cost": {
            **parts,
            "gb_seconds": gb_s,
            "invocations": invocations,
            "s3_put_requests": puts,
            "s3_get_requests": gets,
            "region": region,
            "price_region": region if region in PRICES else "us-east-1",
            "architecture": architecture,
        },
    }
