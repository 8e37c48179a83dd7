"""Model parameters: platform configuration and the two profiles (``aws`` and ``emulator-here``).

A :class:`Profile` holds what the simulator assumes about the machines; a :class:`PlatformConfig` what
the user chooses (W, fan-out, memory, architecture, region). Every ``aws`` number names its source; the
``emulator-here`` numbers were measured on this 2-core box (lambda-local emulator + moto server, see
``benchmarks/scale_validate.py``).

Sources for the ``aws`` profile
-------------------------------
- [S3-perf] AWS, "Best practices design patterns: optimizing Amazon S3 performance"
  (docs.aws.amazon.com/AmazonS3/latest/userguide/optimizing-performance.html): at least 3,500
  PUT/COPY/POST/DELETE and 5,500 GET/HEAD requests per second per partitioned prefix; 503 SlowDown
  beyond, S3 scales partitions up gradually; "first-byte latency" of small requests in the tens of ms.
- [Lambada] Müller, Marroquín, Alonso, "Lambada: Interactive Data Analytics on Cold Data using
  Serverless Cloud Infrastructure", SIGMOD 2020: invocation tree (driver invokes ~√W, each invokes its
  children; one invoke ≈ 30-50 ms from one caller, so a flat start of 1,000 workers takes seconds);
  per-worker S3 scan bandwidth ≈ 90 MB/s with several parallel connections; exchange via S3 with
  write combining and request-count formulas (W PUT, W² GET; two levels 2W PUT, 2W√W GET).
- [Starling] Perron, Castro Fernandez, DeWitt, Madden, "Starling: A Scalable Query Engine on Cloud
  Functions", SIGMOD 2020: S3 GET first-byte latency ≈ 20-30 ms median with a long tail (they issue
  duplicate requests for stragglers); PUT ≈ 30-50 ms; TPC-H SF1000 ≈ $0.26 per query average.
- [Klimovic] Klimovic et al., "Understanding Ephemeral Storage for Serverless Analytics", USENIX ATC
  2018: S3 request latency and per-function throughput measurements from Lambda.
- [Wang] Wang et al., "Peeking Behind the Curtains of Serverless Platforms", USENIX ATC 2018: Lambda
  per-function network is token-bucket shaped; here ~1.2 Gbit/s bursts, ~300 Mbit/s sustained (the
  figures issue 15 and FIELD-NOTES.md quote: 60-175 MB/s per function, bursty).
- [Lambda-scaling] AWS Lambda docs, "Lambda scaling behavior" (Nov 2023 change): each function scales
  by 1,000 concurrent executions every 10 s; default account concurrency 1,000 (raised on request).
- [Lambda-cold] AWS Lambda docs "Lambda execution environment lifecycle" and public cold-start studies
  (e.g. AWS Compute Blog "Operating Lambda: performance optimization"): Python cold start ≈ 0.2-0.5 s
  for the runtime plus package/layer initialisation growing with the deployment size; the layer here
  (duckdb + pyarrow) is ≈185 MB unzipped (FIELD-NOTES.md) — we assume ≈ 5 ms per MB of imports.
- [Lambda-cpu] AWS Lambda docs: one vCPU per 1,769 MB of memory, up to 6 vCPUs at 10,240 MB.
- [botocore] botocore "standard" retry mode: exponential backoff base ``random()`` x 2^attempt s,
  capped at 20 s, throttling errors (503 SlowDown) retried.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from squall.driver.forecast.scale.requests import CURRENT

MB_PER_VCPU = 1769  # [Lambda-cpu]


@dataclass(frozen=True)
class LogNormal:
    """A latency distribution given by its median and p90 (seconds)."""

    median: float
    p90: float

    @property
    def sigma(self) -> float:
        return _sigma(self.median, self.p90)


@lru_cache(maxsize=64)
def _sigma(median: float, p90: float) -> float:
    return max(1e-6, math.log(max(p90, median * 1.0001) / median) / 1.2816)


@dataclass(frozen=True)
class Profile:
    """What the simulator assumes about the platform (see module doc for sources)."""

    name: str
    # invocation
    invoke_api_s: LogNormal = LogNormal(0.035, 0.06)  # one async Invoke call, caller side [Lambada]
    invoke_to_start_s: LogNormal = LogNormal(0.03, 0.08)  # queueing inside Lambda until the handler runs
    cold_start_base_s: float = 0.35  # runtime start [Lambda-cold]
    cold_start_per_layer_mb_s: float = 0.005  # imports of the layer's packages [Lambda-cold]
    layer_mb: float = 185.0
    warm_fraction: float = 0.0  # share of workers that find a warm environment
    burst_concurrency: int = 1000  # new executions per burst window [Lambda-scaling]
    burst_window_s: float = 10.0
    account_concurrency: int = 1000
    worker_setup_s: float = 0.05  # handler work before the first request (client, plan load, DuckDB)
    worker_setup_cpu_s: float = 0.0  # the same as CPU work (shared-CPU hosts)
    stage_overhead_s: float = 0.003  # per stage per rank (status keys are async on AWS)
    # network per function [Wang]
    net_peak_Bps: float = 150e6  # 1.2 Gbit/s
    net_sustained_Bps: float = 37.5e6  # 300 Mbit/s
    net_burst_bytes: float = 300e6  # burst credit of a fresh function
    # S3 [S3-perf] [Starling] [Klimovic]
    s3_get_s: LogNormal = LogNormal(0.025, 0.06)  # first byte
    s3_put_s: LogNormal = LogNormal(0.040, 0.09)
    s3_head_s: LogNormal = LogNormal(0.020, 0.045)
    s3_list_s: LogNormal = LogNormal(0.035, 0.08)
    s3_get_per_prefix: float = 5500.0
    s3_put_per_prefix: float = 3500.0
    #: partitions S3 has split the exchange's hashed key space into. S3 splits a busy prefix gradually
    #: (minutes); 64 assumes a bucket warmed by earlier queries (1: a cold bucket) — an assumption
    s3_prefixes: int = 64
    s3_request_cpu_s: float = 0.0  # client+server CPU per request on a shared-CPU host
    retry_base_s: float = 1.0  # [botocore]
    retry_cap_s: float = 20.0
    threads_per_rank: int = 16  # the exchange's thread pool
    # compute
    compute_speed: float = 1.0  # vCPU speed relative to the calibration machine's core
    host_cores: int = 0  # >0: all workers share this many cores (the emulator); 0: own vCPUs
    background_load: float = 0.0  # runnable threads of other programs on those cores (measured per run)
    threads_override: int = 0  # DuckDB threads per worker (0: memory / 1,769 MB)
    data_on_s3: bool = True  # scans are S3 ranged GETs (False: local files read inside DuckDB)
    # driver
    driver_setup_s: float = 0.0
    driver_cpu_s: float = 0.0  # the driver's own CPU work per query (half before invoking, half after)
    driver_poll_min_s: float = 0.05
    driver_poll_max_s: float = 1.0
    heartbeat_s: float = 2.0
    cleanup_s: float = 0.1
    extra: dict[str, Any] = field(default_factory=dict)

    def with_(self, **changes: Any) -> Profile:
        return replace(self, **changes)


AWS = Profile(name="aws")

#: lambda-local on this machine: 2 shared cores, moto on loopback (a few ms per request, CPU-bound),
#: warm emulator processes (the validation runs one warm-up query first), 1 DuckDB thread per worker
EMULATOR_HERE = Profile(
    name="emulator-here",
    invoke_api_s=LogNormal(0.002, 0.004),
    invoke_to_start_s=LogNormal(0.01, 0.03),
    cold_start_base_s=2.5,
    cold_start_per_layer_mb_s=0.0,
    warm_fraction=1.0,
    burst_concurrency=100000,
    account_concurrency=100000,
    # worker_setup_s, worker_setup_cpu_s, s3_request_cpu_s, driver_setup_s and cleanup_s: fitted on a quiet
    # machine (`benchmarks/scale_validate.py --fit`: least mean |log error| over FIT_GRID) to the validation
    # run of 2026-11-27 05:03Z (W=4,8,16 x Q1,3,6,12, median of 5 runs each), after AWS clients came from
    # one kept boto3 Session (a new Session per client had cost each invocation ~0.3 s of CPU: the fit of
    # 2026-11-23 gave 0.35 s); validated on the next run (05:07Z, benchmarks/scale-out/validation.txt).
    # driver_cpu_s: 0 (inside the others)
    worker_setup_s=0.0,
    worker_setup_cpu_s=0.05,
    stage_overhead_s=0.005,
    net_peak_Bps=1e9,
    net_sustained_Bps=1e9,
    net_burst_bytes=1e12,
    s3_get_s=LogNormal(0.004, 0.01),
    s3_put_s=LogNormal(0.006, 0.015),
    s3_head_s=LogNormal(0.003, 0.008),
    s3_list_s=LogNormal(0.006, 0.015),
    s3_get_per_prefix=1e9,
    s3_put_per_prefix=1e9,
    s3_request_cpu_s=0.005,
    driver_cpu_s=0.0,
    host_cores=2,
    threads_override=1,
    data_on_s3=False,
    driver_setup_s=0.0,
    heartbeat_s=1.0,
    cleanup_s=0.0,
)

PROFILES: dict[str, Profile] = {"aws": AWS, "emulator-here": EMULATOR_HERE}


def profile(name: str | Profile) -> Profile:
    """A profile by name (``aws``, ``emulator-here``) or itself."""
    if isinstance(name, Profile):
        return name
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r} (known: {', '.join(PROFILES)})") from None


@dataclass(frozen=True)
class PlatformConfig:
    """The user's choices: ``workers`` (W), ``fanout`` (None: ⌈√W⌉ as the platform does), memory,
    architecture, region, the exchange's ``levels`` option and the exchange version whose request
    formulas and polling the model follows (default: ``requests.CURRENT``, what ``exchange/s3.py`` runs
    today; see :mod:`squall.driver.forecast.scale.requests`)."""

    workers: int
    fanout: int | None = None
    memory_mb: int = 4096
    architecture: str = "arm64"
    region: str = "us-east-1"
    levels: int | str = "auto"
    exchange_version: str = CURRENT
    profile: str = "aws"

    @property
    def vcpus(self) -> float:
        return max(1.0, min(6.0, self.memory_mb / MB_PER_VCPU))

    def effective_fanout(self) -> int:
        import math

        w = max(self.workers, 1)
        return int(self.fanout or max(2, math.isqrt(w - 1) + 1))
