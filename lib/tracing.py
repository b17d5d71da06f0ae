"""OpenTelemetry traces of one action, from the agent's call to its outcome (docs/operations.md,
"Traces").

Reviewer's part of an action spans many requests and processes: the agent's intake, a reviewer's vote
minutes later, the delivery from a worker, the agent's consume and outcome. They are one trace because
intake stores its span's W3C `traceparent` on the proposal (`Proposal.trace_parent`) and every later
span names it as its parent, or the `traceparent` the agent sent with that call when it sent one.

Configured by the standard environment variables, read by the OpenTelemetry SDK itself: traces are
exported over OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is
set, unless `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`; the sampler, the batch processor,
the service name and the resource come from their own `OTEL_*` variables. Off (the default), no
provider exists and every function here returns at its first line: the cost of a span is one call and
one test of a module global (bench/README.md, "Traces").

What goes into attributes: ids, digests, states, counts and the operator's own names (agent slugs,
policy refs); never agent text (summaries, actions, reasons) nor people's names or e-mails.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:  # the SDK is imported only when traces are on
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

# W3C Trace Context, version 00: what is accepted from an agent and stored on a proposal.
TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
TRACEPARENT_LENGTH = 55

SERVER, INTERNAL, CLIENT = "server", "internal", "client"

_tracer: Tracer | None = None
_provider: TracerProvider | None = None
_configured = False
_configure_lock = threading.Lock()


def wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for traces (read once by the settings, which fail on a bad value)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    if exporter not in ("", "otlp"):
        raise ImproperlyConfigured(
            f"OTEL_TRACES_EXPORTER must be 'otlp' or 'none', not {exporter!r} (Reviewer exports OTLP/HTTP)"
        )
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    if protocol and protocol.strip() != "http/protobuf":
        raise ImproperlyConfigured(
            f"OTEL_EXPORTER_OTLP_PROTOCOL must be 'http/protobuf', not {protocol!r}: "
            "Reviewer exports OTLP/HTTP"
        )
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return bool(endpoint and endpoint.strip())


def use_provider(provider: TracerProvider | None) -> None:
    """Record spans with `provider` (None: none at all). The tests give an SDK provider with an in-memory
    exporter; a process with traces on gets its own from `_configure()` at its first span."""
    global _tracer, _provider, _configured
    with _configure_lock:
        _provider = provider
        _tracer = provider.get_tracer("reviewer") if provider is not None else None
        _configured = True


def _configure() -> None:
    global _configured
    from django.conf import settings

    with _configure_lock:
        if _configured:
            return
        if not settings.TRACES_ENABLED:
            _configured = True
            return
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        named = "OTEL_SERVICE_NAME" in os.environ or "service.name=" in os.environ.get(
            "OTEL_RESOURCE_ATTRIBUTES", ""
        )
        resource = Resource.create({} if named else {"service.name": "reviewer"})
        # The SDK reads the rest itself: the sampler (OTEL_TRACES_SAMPLER), the exporter's endpoint,
        # headers and timeout (OTEL_EXPORTER_OTLP_*), the batches (OTEL_BSP_*); it flushes at exit.
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    use_provider(provider)


def _active() -> Tracer | None:
    if not _configured:
        _configure()
    return _tracer


def enabled() -> bool:
    return _active() is not None


def valid_traceparent(value: object) -> str:
    """`value` if it is a W3C traceparent (version 00) Reviewer accepts, else "": an agent's header or
    metadata is untrusted input, and a malformed one starts a trace of Reviewer's own."""
    if isinstance(value, str) and len(value) == TRACEPARENT_LENGTH and TRACEPARENT.fullmatch(value):
        return value
    return ""


def from_headers(headers: Mapping[str, str]) -> str:
    """The request's valid `traceparent` header, or ""."""
    if _active() is None:
        return ""
    return valid_traceparent(headers.get("traceparent", "").strip().lower())


def _context(traceparent: str) -> Context | None:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": traceparent}) if traceparent else None


def current_traceparent() -> str:
    """The traceparent naming the current span (what a proposal stores, what a call to an agent sends),
    or "" when traces are off or no span is recording."""
    if _active() is None:
        return ""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent", "")


def _kind(kind: str) -> Any:
    from opentelemetry.trace import SpanKind

    return {SERVER: SpanKind.SERVER, CLIENT: SpanKind.CLIENT}.get(kind, SpanKind.INTERNAL)


class _NoSpan:
    """What `span()` yields when traces are off: attributes set on it go nowhere."""

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        pass


NO_SPAN = _NoSpan()
_OFF = contextlib.nullcontext(NO_SPAN)


def span(
    name: str,
    *,
    parent: str | None = None,
    kind: str = INTERNAL,
    attributes: Mapping[str, Any] | None = None,
) -> contextlib.AbstractContextManager[Span | _NoSpan]:
    """A span around a block, the current span inside it (spans opened in the block are its children).
    `parent`: a traceparent (the agent's, or the one a proposal stored) instead of the current span;
    "" means "none known" and starts a new trace where no span is current. An exception leaving the
    block marks the span as an error."""
    tracer = _active()
    if tracer is None:
        return _OFF
    context = _context(parent) if parent else None
    return tracer.start_as_current_span(name, context=context, kind=_kind(kind), attributes=attributes)


class LaterSpan:
    """A span whose parent and attributes are known only once its work is done (the consume's one
    statement returns the proposal that names the trace): timed from creation, recorded by `finish()`."""

    def __init__(self, name: str, kind: str, incoming: str):
        self.name, self.kind, self.incoming = name, kind, incoming
        self.started = time.time_ns()
        self.parent = ""
        self.attributes: dict[str, Any] = {}
        self.error: BaseException | None = None

    def set_attribute(self, key: str, value: Any) -> None:
        self.attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self.attributes.update(attributes)

    def finish(self, tracer: Tracer) -> None:
        from opentelemetry.trace import Status, StatusCode

        # The agent's own traceparent for this call wins: its span is this call's caller.
        context = _context(self.incoming or self.parent)
        recorded = tracer.start_span(
            self.name,
            context=context,
            kind=_kind(self.kind),
            attributes=self.attributes,
            start_time=self.started,
        )
        if self.error is not None:
            recorded.record_exception(self.error)
            recorded.set_status(Status(StatusCode.ERROR, type(self.error).__name__))
        recorded.end()


@contextlib.contextmanager
def _later(tracer: Tracer, name: str, kind: str, incoming: str) -> Iterator[LaterSpan]:
    later = LaterSpan(name, kind, incoming)
    try:
        yield later
    except BaseException as error:
        later.error = error
        raise
    finally:
        later.finish(tracer)


def later_span(
    name: str, *, kind: str = SERVER, incoming: str = ""
) -> contextlib.AbstractContextManager[LaterSpan | _NoSpan]:
    """A span around a block whose parent is set inside it (`set_parent`, once the proposal is known);
    `incoming`, the agent's traceparent for this call, wins over it."""
    tracer = _active()
    if tracer is None:
        return _OFF
    return _later(tracer, name, kind, incoming)


def set_parent(later: LaterSpan | _NoSpan, read_traceparent: Callable[[], str]) -> None:
    """The later span's parent, read only while traces are on: reading it may cost a query (the
    consume's proposal has `trace_parent` as a deferred field), which an untraced call must not pay."""
    if isinstance(later, LaterSpan):
        later.parent = read_traceparent()
