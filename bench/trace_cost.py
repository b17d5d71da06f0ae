"""What traces cost a request (lib/tracing.py), off and on, in this process: not a `make bench` row.

    .venv/bin/python bench/trace_cost.py

Off (the default): each span is one call that returns a shared no-op context manager; the script times
it against a bare `contextlib.nullcontext()`. On: each span made under a parent traceparent, with
attributes, by the OpenTelemetry SDK with an exporter that drops what it gets (the export itself runs
on the batch processor's thread, off the request). A policy-allowed REST call makes four spans
(intake, policy, route, decision), a vote two, a consume or an outcome one.
"""

import contextlib
import os
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewer.settings")
os.environ.setdefault("DEBUG", "true")

import django  # noqa: E402

django.setup()

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult  # noqa: E402

from lib import tracing  # noqa: E402

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
SPANS_PER_ALLOWED_CALL = 4


class Dropped(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS


def per_call(function, number: int) -> float:
    return min(timeit.repeat(function, number=number, repeat=5)) / number


def main() -> None:
    bare = contextlib.nullcontext()

    def baseline():
        with bare:
            pass

    def span():
        with tracing.span("reviewer.policy", parent=PARENT) as current:
            current.set_attributes({"reviewer.proposal.id": "p"})

    tracing.use_provider(None)
    base, off = per_call(baseline, 200_000), per_call(span, 200_000)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Dropped()))
    tracing.use_provider(provider)
    on = per_call(span, 20_000)
    print(f"bare nullcontext: {base * 1e9:.0f} ns")
    print(f"span, traces off: {off * 1e9:.0f} ns ({(off - base) * 1e9:.0f} ns over the bare block)")
    print(f"span, traces on:  {on * 1e6:.1f} us")
    added_off, added_on = SPANS_PER_ALLOWED_CALL * (off - base), SPANS_PER_ALLOWED_CALL * on
    print(f"allowed REST call ({SPANS_PER_ALLOWED_CALL} spans): off +{added_off * 1e6:.2f} us,", end=" ")
    print(f"on +{added_on * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
