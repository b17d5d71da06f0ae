"""The agent's trace, carried to Reviewer: a W3C `traceparent` for the agent's current span.

OpenTelemetry is optional: when `opentelemetry-api` is installed and the agent has a span recording,
every call this package makes to Reviewer (submit, pull, consume, outcome) and the status message that
parks an A2A task carry its context, through the agent's own propagators (`OTEL_PROPAGATORS`, W3C trace
context by default), and Reviewer's spans of that action join the agent's trace. Without it, or with
no span, nothing is added.

A protected resource (reviewer_gate.resource) continues its caller's trace the same way: while it
decides on a request, `continuing(request headers)` lends the caller's `traceparent` to the calls it
makes to Reviewer, when the resource itself has no span recording (its server is not instrumented).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

try:
    from opentelemetry import propagate, trace
except ImportError:  # traces are the agent's choice: the package works without them
    propagate = None  # type: ignore[assignment]
    trace = None  # type: ignore[assignment]


# W3C Trace Context's traceparent: version, trace id, parent id, flags (lower-case hex, ids not all zero).
TRACEPARENT = re.compile(r"[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
_lent: ContextVar[tuple[tuple[str, str], ...]] = ContextVar("reviewer_gate_lent_trace", default=())


def trace_headers() -> dict[str, str]:
    """`traceparent` (and `tracestate`) for the current span; else what `continuing` lent; else {}."""
    if propagate is None or trace is None or not trace.get_current_span().get_span_context().is_valid:
        return dict(_lent.get())
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return {name: value for name, value in carrier.items() if name in ("traceparent", "tracestate")}


@contextmanager
def continuing(headers: Mapping[str, str]) -> Iterator[None]:
    """Within the block, calls to Reviewer carry the trace context of an incoming request (lower-case
    header names) when no span of this process is recording; a malformed traceparent lends nothing."""
    traceparent = (headers.get("traceparent") or "").strip()
    lent: dict[str, str] = {}
    if TRACEPARENT.fullmatch(traceparent):
        lent["traceparent"] = traceparent
        tracestate = (headers.get("tracestate") or "").strip()
        if tracestate:
            lent["tracestate"] = tracestate[:512]  # W3C: at most 32 members; a bound, not a parser
    token = _lent.set(tuple(lent.items()))
    try:
        yield
    finally:
        _lent.reset(token)


def with_trace(metadata: dict[str, Any]) -> dict[str, Any]:
    """A2A message metadata with the current span's `traceparent` added (Reviewer's push intake reads
    it there: the push itself is sent later, outside the agent's span)."""
    traceparent = trace_headers().get("traceparent")
    return {**metadata, "traceparent": traceparent} if traceparent else metadata
