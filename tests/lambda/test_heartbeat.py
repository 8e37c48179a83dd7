"""A worker's heartbeat keeps its rhythm while S3 refuses its writes: each beat is one try, not a backoff.

Through a retrying client one throttled beat slept up to a minute of backoff, and the driver took the live
rank for dead after ``dead_after_s`` (CI saw a straggler re-invoked as "heartbeat lost" instead of given its
duplicate).
"""

from __future__ import annotations

import time
from itertools import pairwise

import pytest

from squall.driver.platforms.lambda_.worker import _Heartbeat, _Status, heartbeat_client

from ..s3server import moto_available, moto_s3

pytestmark = pytest.mark.skipif(moto_available() is not None, reason=str(moto_available()))
BUCKET = "squall-heartbeat-test"


def _throttle_every_put(client, tries: list[float]) -> None:
    from botocore.awsrequest import AWSResponse

    class Raw:
        def stream(self, **_kwargs):
            yield b"<Error><Code>SlowDown</Code><Message>injected</Message></Error>"

    def refuse(request, **_kwargs):
        tries.append(time.monotonic())
        return AWSResponse(request.url, 503, {}, Raw())

    client.meta.events.register("before-send.s3.PutObject", refuse)


def test_beats_keep_their_interval_while_every_write_is_throttled():
    with moto_s3(BUCKET) as s3:
        config = {"endpoint_url": s3.endpoint_url}
        status = _Status(s3.client(), BUCKET, "q/x", rank=0, attempt=0)
        client = heartbeat_client(config, 0.2)
        tries: list[float] = []
        _throttle_every_put(client, tries)
        beat = _Heartbeat(status, 0.2, config, client=client)
        beat.start()
        time.sleep(2.0)
        beat.halt()
    # ~10 beats in 2 s, each a single try: the gaps stay near the interval (backoff would make them grow)
    assert len(tries) >= 5, tries
    gaps = [b - a for a, b in pairwise(tries)]
    assert max(gaps) < 1.0, gaps
    assert status.puts == 0


def test_beats_land_and_change_the_etag():
    with moto_s3(BUCKET) as s3:
        client = s3.client()
        status = _Status(client, BUCKET, "q/y", rank=1, attempt=0)
        beat = _Heartbeat(status, 0.2, {"endpoint_url": s3.endpoint_url})
        beat.start()
        etags = set()
        for _ in range(10):
            time.sleep(0.15)
            try:
                etags.add(client.head_object(Bucket=BUCKET, Key=status.base + "hb")["ETag"])
            except client.exceptions.ClientError:
                pass
        beat.halt()
    assert len(etags) >= 3 and status.puts >= 3
