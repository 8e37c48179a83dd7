"""Fuzz the OpenAPI document of a running ``squall serve`` with schemathesis: no request may get a 5xx.

The document is the one the server serves (``/v1/openapi.json``), built here from the same resolver at
collection time (schemathesis' lazy fixture loader does not work with this pytest). Bounded: a few dozen
examples per operation, no deadline (the server plans every fuzzed SQL text).
"""

from __future__ import annotations

import json

import pytest

schemathesis = pytest.importorskip("schemathesis")
pytest.importorskip("aws_lambda_powertools")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402

from squall.service.api import create_app, openapi_json  # noqa: E402

from .conftest import TOKEN  # noqa: E402

AUTH = {"Authorization": f"Bearer {TOKEN}"}
DOCUMENT = json.loads(openapi_json(create_app(None), secured=True))  # type: ignore[arg-type]
schema = schemathesis.openapi.from_dict(DOCUMENT)


def test_served_document_is_the_fuzzed_one(server):
    import requests

    assert requests.get(f"{server.url}/v1/openapi.json", timeout=10).json() == DOCUMENT


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_server_errors(case, server):
    # every default check (5xx, documented status codes, content types, response schemas, 405s) except
    # positive_data_acceptance: a schema-valid body can still hold bad SQL, which is a 400
    case.call_and_validate(
        base_url=server.url, headers=AUTH, excluded_checks=[positive_data_acceptance], timeout=30
    )
