"""One approved action is one trace in the tracing system, over real HTTP: Reviewer under Daphne and its
worker export OTLP/HTTP (configured only by the standard OTEL_* variables) to a collector on loopback.

The collector is a stand-in for the OpenTelemetry Collector (or Jaeger, Tempo, any OTLP/HTTP receiver),
which this machine does not have: a plain HTTP server that answers POST /v1/traces as the OTLP/HTTP
specification says and decodes each body with `opentelemetry-proto`'s `ExportTraceServiceRequest`, the
protobuf every OTLP receiver decodes. What it checks is what a receiver gets on the wire.

The agent is this test: a REST agent (reviewer-gate's ReviewerClient) acting inside a span of its own
tracer, whose A2A server is a real a2a-sdk server on loopback (tests/approvals/fake_agent.py) that
receives the decision's continuation."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.trace import TracerProvider

from approvals.a2a.client import forget_cards
from approvals.models import Proposal
from reviewer_gate import ReviewerClient, build_request
from tests import factories
from tests.approvals.fake_agent import FakeAgent
from tests.e2e.conftest import Stack, _running
from tests.e2e.test_a2a_loop import decide_in_browser
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

EXPECTED = {
    "reviewer.intake",
    "reviewer.policy",
    "reviewer.route",
    "reviewer.vote",
    "reviewer.decision",
    "reviewer.delivery",
    "reviewer.consume",
    "reviewer.outcome",
}


class Collector:
    """OTLP/HTTP on loopback: every span it receives, with its resource's service name."""

    def __init__(self):
        self.spans: list[tuple[str, Span]] = []  # (service.name, Span protobuf)
        self.content_types: set[str] = set()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                collector.content_types.add(self.headers["Content-Type"])
                request = ExportTraceServiceRequest.FromString(body)
                for resource_spans in request.resource_spans:
                    service = next(
                        (
                            a.value.string_value
                            for a in resource_spans.resource.attributes
                            if a.key == "service.name"
                        ),
                        "",
                    )
                    for scope_spans in resource_spans.scope_spans:
                        collector.spans.extend((service, span) for span in scope_spans.spans)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def of_trace(self, trace_id: bytes) -> dict:
        return {span.name: (service, span) for service, span in self.spans if span.trace_id == trace_id}


@pytest.fixture
def collector():
    running = Collector()
    running.thread.start()
    try:
        yield running
    finally:
        running.server.shutdown()
        running.server.server_close()


@pytest.fixture
def traced_stack(transactional_db, tmp_path, monkeypatch, collector):
    """Reviewer (Daphne) and its worker, exporting their spans to the collector every 100 ms."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "reviewer-e2e")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    yield from _running(Stack(tmp_path, with_agent=False))


@pytest.fixture
def a2a_agent(settings):
    settings.AGENT_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    agent = FakeAgent().start()
    forget_cards()
    try:
        yield agent
    finally:
        agent.stop()


def test_an_approved_action_is_one_trace_from_the_agents_span_to_the_outcome(
    traced_stack, collector, a2a_agent
):
    tenant = factories.make_tenant()
    factories.make_user("requester", tenant=tenant, principal_id="requester", groups=["finance"])
    reviewer = factories.make_user("reviewer_a", tenant=tenant, groups=["finance"])
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 1}]
    )
    registered = factories.make_agent(tenant, api_token="agent-api-token", card_url=a2a_agent.card_url)
    task_id, context_id = a2a_agent.open_task()
    a2a_agent.front.traceparents.clear()
    client = ReviewerClient(
        reviewer_url=traced_stack.url,
        api_token="agent-api-token",
        audience=registered.audience,
        poll_seconds=5,
    )
    agent_tracer = TracerProvider().get_tracer("refund agent")

    with agent_tracer.start_as_current_span("refund order 1182") as agent_span:
        request = build_request(
            {
                "tool": "payments.refund",
                "arguments": {"order_id": "1182", "amount": "40.00", "currency": "EUR"},
            },
            summary="Refund EUR 40.00 for order 1182",
            principal={"id": "requester"},
        )
        submission = client.submit(request, task_id=task_id, context_id=context_id, decision_in_answer=False)
        decide_in_browser(traced_stack, reviewer, Proposal.objects.get(pk=submission.proposal_id), "approve")
        approval = client.release(submission, client.wait_for_token(submission, timeout=30))  # consumes
        approval.report("succeeded", transaction_id="tx-1182")
    client.close()

    agent_trace = agent_span.get_span_context().trace_id.to_bytes(16, "big")
    agent_span_id = agent_span.get_span_context().span_id.to_bytes(8, "big")
    wait_until(
        lambda: EXPECTED <= set(collector.of_trace(agent_trace)),
        "every span of the action at the collector",
        timeout=30,
        interval=0.1,
        detail=lambda: f"{sorted(s.name for _, s in collector.spans)}\n{traced_stack.logs()}",
    )
    trace = {name: span for name, (_, span) in collector.of_trace(agent_trace).items()}
    assert {service for service, _ in collector.of_trace(agent_trace).values()} == {"reviewer-e2e"}
    assert collector.content_types == {"application/x-protobuf"}
    intake = trace["reviewer.intake"].span_id
    assert trace["reviewer.intake"].parent_span_id == agent_span_id
    assert trace["reviewer.vote"].parent_span_id == intake
    assert trace["reviewer.decision"].parent_span_id == trace["reviewer.vote"].span_id
    assert trace["reviewer.delivery"].parent_span_id == intake
    assert trace["reviewer.consume"].parent_span_id == agent_span_id  # reviewer-gate sent the agent's span
    assert trace["reviewer.outcome"].parent_span_id == agent_span_id
    # The continuation reached the agent's A2A server with the delivery span as its parent.
    delivered = trace["reviewer.delivery"]
    (sent,) = a2a_agent.front.traceparents
    assert sent.startswith(f"00-{delivered.trace_id.hex()}-{delivered.span_id.hex()}-")
    assert Proposal.objects.get(pk=submission.proposal_id).state == "succeeded"
