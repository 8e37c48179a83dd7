"""State stores: the same suite on a local folder and on moto's S3 server."""

from __future__ import annotations

import concurrent.futures
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from squall.errors import OptionError
from squall.service.state import LocalStateStore, S3StateStore, StateStore, check_key, state_store

from ..s3server import moto_available, moto_s3

BUCKET = "squall-state-test"


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path) -> Iterator[StateStore]:
    if request.param == "local":
        yield state_store(str(tmp_path / "state"))
        return
    if moto_available() is not None:
        pytest.skip(str(moto_available()))
    with moto_s3(BUCKET):
        yield state_store(f"s3://{BUCKET}/test-{uuid.uuid4().hex[:8]}/queries")


def test_put_get_size_and_json(store):
    assert store.get("q1/status.json") is None and store.size("q1/status.json") is None
    assert not store.exists("q1/status.json")
    assert store.put("q1/result.arrow", b"\x00\x01\x02")
    assert store.get("q1/result.arrow") == b"\x00\x01\x02" and store.size("q1/result.arrow") == 3
    assert store.put_json("q1/status.json", {"status": "queued", "n": 1})
    assert store.put_json("q1/status.json", {"status": "running"})  # overwrite
    assert store.get_json("q1/status.json") == {"status": "running"}
    assert store.exists("q1/status.json")


def test_create_only_is_atomic(store):
    assert store.put("k/idem.json", b"first", create_only=True)
    assert not store.put("k/idem.json", b"second", create_only=True)
    assert store.get("k/idem.json") == b"first"

    def claim(i: int) -> bool:
        return store.put("race/key.json", str(i).encode(), create_only=True)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        wins = list(pool.map(claim, range(16)))
    assert wins.count(True) == 1
    assert store.get("race/key.json") == str(wins.index(True)).encode()


def test_links(store):
    store.put("q2/result.csv", b"a\n1\n")
    link = store.link("q2/result.csv", expires_s=60, content_type="text/csv", filename="q2.csv")
    if isinstance(store, S3StateStore):
        assert link.path is None and link.url
        with urllib.request.urlopen(link.url) as response:
            assert response.read() == b"a\n1\n"
            assert response.headers["Content-Type"] == "text/csv"
    else:
        assert link.url is None and Path(link.path).read_bytes() == b"a\n1\n"


@pytest.mark.parametrize("key", ["../x", "/abs", "a/../b", ".hidden", "a//b", "", "a b", "a/\x00"])
def test_unsafe_keys_are_rejected(store, key):
    with pytest.raises(OptionError):
        store.put(key, b"x")
    with pytest.raises(OptionError):
        check_key(key)


def test_lookup_by_scheme(tmp_path):
    assert isinstance(state_store(str(tmp_path)), LocalStateStore)
    assert isinstance(state_store(f"file://{tmp_path}"), LocalStateStore)
    s3 = state_store("s3://bucket/some/prefix/")
    assert isinstance(s3, S3StateStore) and s3.url == "s3://bucket/some/prefix/" and s3.presigns
    assert state_store("s3://bucket").url == "s3://bucket/"
    with pytest.raises(OptionError, match="unknown state store scheme"):
        state_store("gs://bucket/x")
    with pytest.raises(OptionError, match="bucket"):
        state_store("s3:///x")


def test_children_and_delete(store):
    for key in ("qb/status.json", "qb/result.arrow", "qb/pages/json-0-10.json", "qa/status.json",
                "qc/request.json", "_idempotency/k1.json", "_idempotency/k2.json"):  # fmt: skip
        store.put(key, b"x")
    assert store.children() == ["_idempotency", "qa", "qb", "qc"]
    assert store.children("", start_after="qa") == ["qb", "qc"]
    assert store.children("", start_after="q", limit=2) == ["qa", "qb"]
    assert store.children("qb") == ["pages", "result.arrow", "status.json"]
    assert store.children("_idempotency") == ["k1.json", "k2.json"]
    assert store.children("nothing") == []

    store.delete("qb")  # the key and everything under it
    assert store.children() == ["_idempotency", "qa", "qc"]
    assert store.get("qb/pages/json-0-10.json") is None and store.get("qb/status.json") is None
    store.delete("_idempotency/k1.json")
    assert store.children("_idempotency") == ["k2.json"]
    store.delete("missing")  # nothing to delete is no error
    assert store.get("qa/status.json") == b"x"
