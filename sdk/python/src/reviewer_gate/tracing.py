"""The agent's trace, carried to Reviewer: a W3C `traceparent` for the agent's current span.

OpenTelemetry is optional: when `opentelemetry-api` is installed and the agent has a span recording,
every call this package makes to Reviewer (submit, pull, consume, outcome) and the status message that
parks an A2A task carry its context, through the agent's own propagators (`OTEL_PROPAGATORS`, W3C trace
context by default), and Reviewer's spans of that action join the agent's trace. Without it, or with
no span, nothing is added.
"""

from __future__ import annotations

from typing import Any

try:
    from opentelemetry import propagate, trace
except ImportError:  # traces are the agent's choice: the package works without them
    propagate = None  # type: ignore[assignment]
    trace = None  # type: ignore[assignment]


def trace_headers() -> dict[str, str]:
    """`traceparent` (and `tracestate`) for the current span, or {} when there is none to continue."""
    if propagate is None or trace is None or not trace.get_current_span().get_span_context().is_valid:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return {name: value for name, value in carrier.items() if name in ("traceparent", "tracestate")}


def with_trace(metadata: dict[str, Any]) -> dict[str, Any]:
    """A2A message metadata with the current span's `traceparent` added (Reviewer's push intake reads
    it there: the push itself is sent later, outside the agent's span)."""
    traceparent = trace_headers().get("traceparent")
    return {**metadata, "traceparent": traceparent} if traceparent else metadata
