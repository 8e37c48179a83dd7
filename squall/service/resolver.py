"""A Powertools REST resolver that many threads may use at once, with no lock.

``APIGatewayRestResolver.resolve`` keeps the request being resolved on a **class** attribute
(``BaseRouter.current_event``) and its routing state on the instance (``context``), so two threads resolving
at once could route or validate each other's data. :class:`ConcurrentRestResolver` gives every thread its own
copy of that state the way Powertools' own ASGI resolver (``http_resolver.HttpResolverLocal``) does: properties
on the subclass shadow the class attributes, and read a per-thread slot that :meth:`resolve` fills. Route
middleware stacks, which Powertools builds lazily on a route's first request, are built once under a lock
before the first request (two threads building one would wrap it twice).

The body's JSON is parsed by :func:`parse_json_body`: a body nested too deeply for the parser is a
``json.JSONDecodeError`` (so the validation middleware answers 422), never a RecursionError (a 500).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from aws_lambda_powertools.event_handler.api_gateway import BaseRouter
from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent


def parse_json_body(text: str) -> Any:
    """``json.loads(text)``; a body nested too deeply for the parser raises ``json.JSONDecodeError`` like any
    other malformed body (Python's decoder stops with a RecursionError at the interpreter's recursion limit)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", text, 0) from None


@dataclass
class _RequestState:
    event: BaseProxyEvent | None = None
    lambda_context: Any = None
    context: dict[str, Any] = field(default_factory=dict)
    processed_stack_frames: list[str] = field(default_factory=list)


class ConcurrentRestResolver(APIGatewayRestResolver):
    """``APIGatewayRestResolver`` whose :meth:`resolve` may run in many threads at once (see module doc)."""

    def __init__(self, **kwargs: Any) -> None:
        self._local = threading.local()
        self._startup = _RequestState()
        self._warm_lock = threading.Lock()
        self._warm = False
        kwargs.setdefault("json_body_deserializer", parse_json_body)
        super().__init__(**kwargs)

    @property
    def _state(self) -> _RequestState:
        state: _RequestState | None = getattr(self._local, "state", None)
        return state if state is not None else self._startup

    @property  # type: ignore[override]
    def current_event(self) -> BaseProxyEvent:
        return self._state.event or BaseRouter.current_event

    @current_event.setter
    def current_event(self, value: BaseProxyEvent) -> None:
        self._state.event = value

    @property
    def lambda_context(self) -> Any:
        return self._state.lambda_context or BaseRouter.lambda_context

    @lambda_context.setter
    def lambda_context(self, value: Any) -> None:
        self._state.lambda_context = value

    @property
    def context(self) -> dict[str, Any]:
        return self._state.context

    @context.setter
    def context(self, value: dict[str, Any]) -> None:
        self._state.context = value

    @property
    def processed_stack_frames(self) -> list[str]:
        return self._state.processed_stack_frames

    @processed_stack_frames.setter
    def processed_stack_frames(self, value: list[str]) -> None:
        self._state.processed_stack_frames = value

    def _build_stacks(self) -> None:
        """Build every route's middleware stack once, before any request uses one."""
        with self._warm_lock:
            if self._warm:
                return
            for route in self._static_routes + self._dynamic_routes:
                if not route._middleware_stack_built:
                    route._build_middleware_stack(router_middlewares=self._router_middlewares, app=self)
            self._warm = True

    def resolve(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        """Resolve one API Gateway proxy event in this thread's own request state."""
        if not self._warm:
            self._build_stacks()
        self._local.state = _RequestState(
            event=self._to_proxy_event(dict(event)),
            lambda_context=context,
            context=dict(self._startup.context),
        )
        try:
            return super().resolve(event, context)
        finally:
            self._local.state = None
