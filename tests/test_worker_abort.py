"""Workers stop between stages when the query was aborted (``Exchange.aborted``)."""

from __future__ import annotations

import pytest

import squall
from squall.exchange.base import ExchangeAborted, open_exchange
from squall.exchange.local import LocalExchangeFactory
from squall.operators.worker import Worker


def test_worker_checks_abort_before_each_stage(sf001, tmp_path):
    con = squall.Connection(data=str(sf001), workers=1)  # planning only: no worker processes start
    try:
        plan = con.plan("SELECT count(*) FROM nation")
    finally:
        con.close()
    factory = LocalExchangeFactory(root=tmp_path)
    config = factory.prepare("qabort", 1)
    exchange = open_exchange(config, 0, 1)
    assert exchange.aborted() is False
    factory.abort(config, "query cancelled")
    assert exchange.aborted() is True
    with pytest.raises(ExchangeAborted, match="before stage"):
        Worker(plan, 0, exchange, "qabort").run()
    factory.cleanup(config)
    assert not (tmp_path / "qabort").exists()
