"""Traces of one action (lib/tracing.py), recorded with the OpenTelemetry SDK's in-memory exporter: the
agent's W3C traceparent (REST header, A2A status metadata) is continued at intake, stored with the
proposal, and the vote, the decision, the delivery (which sends it on to the agent), the consume and
the outcome join the same trace; attributes carry ids, never agent text."""

import json

import pytest
from django.core.exceptions import ImproperlyConfigured
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import format_span_id, format_trace_id

from approvals.models import Decision, Proposal
from approvals.worker.loop import Worker
from lib import tracing
from reviewer_gate.decision import approval_request_metadata
from reviewer_gate.tracing import trace_headers
from tests import factories
from tests.approvals.test_push import parked, push
from tests.factories import approval_request

pytestmark = pytest.mark.django_db

AGENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
AGENT_SPAN = "b7ad6b7169203331"
AGENT_CONSUME_SPAN = "c7ad6b7169203332"
AUTH = {"HTTP_AUTHORIZATION": "Bearer api-secret"}


@pytest.fixture
def spans():
    """Reviewer's spans, kept in memory (the SDK's own exporter) instead of sent over OTLP."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    try:
        yield exporter
    finally:
        tracing.use_provider(None)
        provider.shutdown()


def post(client, url, body, **headers):
    return client.post(url, data=json.dumps(body), content_type="application/json", **{**AUTH, **headers})


def named(exporter) -> dict:
    finished = exporter.get_finished_spans()
    by_name = {span.name: span for span in finished}
    assert len(by_name) == len(finished), [span.name for span in finished]  # one span of each
    return by_name


def parent_of(span) -> str:
    return format_span_id(span.parent.span_id) if span.parent else ""


def span_id(span) -> str:
    return format_span_id(span.context.span_id)


def test_one_approved_action_is_one_trace_from_the_agents_span_to_its_outcome(
    client, fake_agent, tenant, refund_policy, requester, reviewer_a, spans
):
    agent = factories.make_agent(tenant, card_url=fake_agent.card_url)
    task_id, context_id = fake_agent.open_task()
    fake_agent.front.traceparents.clear()  # (open_task's own calls)
    body = {"task_id": task_id, "context_id": context_id, "request": approval_request()}

    submitted = post(client, "/api/v1/proposals", body, HTTP_TRACEPARENT=f"00-{AGENT_TRACE}-{AGENT_SPAN}-01")
    proposal = Proposal.objects.get(agent=agent, task_id=task_id)
    Worker().tick()  # the reviewers to tell are chosen
    factories.vote(proposal, reviewer_a)
    assert Worker().tick().delivered == 1
    decision = Decision.objects.get(proposal=proposal)
    consumed = post(
        client,
        f"/api/v1/decisions/{decision.jti}/consume",
        {"rev": decision.rev},
        HTTP_TRACEPARENT=f"00-{AGENT_TRACE}-{AGENT_CONSUME_SPAN}-01",
    )
    reported = post(client, f"/api/v1/decisions/{decision.jti}/outcome", {"status": "succeeded"})

    assert (submitted.status_code, consumed.status_code, reported.status_code) == (201, 200, 200)
    by_name = named(spans)
    assert set(by_name) == {
        "reviewer.intake",
        "reviewer.policy",
        "reviewer.route",
        "reviewer.notify",
        "reviewer.vote",
        "reviewer.decision",
        "reviewer.delivery",
        "reviewer.consume",
        "reviewer.outcome",
    }
    assert {format_trace_id(span.context.trace_id) for span in by_name.values()} == {AGENT_TRACE}
    intake = span_id(by_name["reviewer.intake"])
    assert parent_of(by_name["reviewer.intake"]) == AGENT_SPAN
    assert parent_of(by_name["reviewer.policy"]) == intake
    assert parent_of(by_name["reviewer.route"]) == intake
    assert parent_of(by_name["reviewer.notify"]) == intake  # in the worker, stored with the proposal
    assert by_name["reviewer.notify"].attributes["reviewer.notify.reviewers"] == 1
    assert parent_of(by_name["reviewer.vote"]) == intake  # stored with the proposal
    assert parent_of(by_name["reviewer.decision"]) == span_id(by_name["reviewer.vote"])
    assert parent_of(by_name["reviewer.delivery"]) == intake
    assert parent_of(by_name["reviewer.consume"]) == AGENT_CONSUME_SPAN  # the agent's own span wins
    assert parent_of(by_name["reviewer.outcome"]) == intake  # none sent: the proposal's trace
    assert Proposal.objects.get(pk=proposal.pk).trace_parent == f"00-{AGENT_TRACE}-{intake}-01"
    # The delivery's call carried its span to the agent.
    assert fake_agent.front.traceparents == [f"00-{AGENT_TRACE}-{span_id(by_name['reviewer.delivery'])}-01"]
    # Linked to the proposal and the decision by their ids.
    assert by_name["reviewer.intake"].attributes["reviewer.proposal.id"] == str(proposal.id)
    for name in ("reviewer.decision", "reviewer.delivery", "reviewer.consume", "reviewer.outcome"):
        assert by_name[name].attributes["reviewer.decision.jti"] == str(decision.jti), name
    assert by_name["reviewer.outcome"].attributes["reviewer.proposal.state"] == "succeeded"
    assert list(by_name["reviewer.policy"].attributes["reviewer.policy.versions"]) == ["refunds@1"]


def test_no_span_carries_agent_text_or_peoples_names(
    client, agent, tenant, refund_policy, requester, reviewer_a, spans
):
    request = approval_request(summary="Refund Mrs Example Person her EUR 40")
    body = {"task_id": "task-private", "context_id": "ctx-1", "request": request}

    post(client, "/api/v1/proposals", body)
    factories.vote(Proposal.objects.get(task_id="task-private"), reviewer_a)

    values = " ".join(
        str(value) for span in spans.get_finished_spans() for value in (span.attributes or {}).values()
    )
    assert values
    for private in ("Example Person", request["principal"]["display"], reviewer_a.username, "EUR 40"):
        assert private not in values


def test_a_push_continues_the_span_the_agent_parked_the_task_in(client, agent, refund_policy, spans):
    agent_tracer = TracerProvider().get_tracer("the agent")
    with agent_tracer.start_as_current_span("park the refund") as agent_span:
        metadata = approval_request_metadata(approval_request())  # reviewer_gate adds the traceparent
    body = parked()
    body["statusUpdate"]["status"]["message"]["metadata"] = metadata

    response = push(client, body)

    assert response.status_code == 201
    intake = named(spans)["reviewer.intake"]
    assert intake.context.trace_id == agent_span.get_span_context().trace_id
    assert intake.parent.span_id == agent_span.get_span_context().span_id
    assert intake.attributes["reviewer.intake.via"] == "push"


@pytest.mark.parametrize(
    "traceparent", ["00-zzzz-b7ad6b7169203331-01", "01-" + "a" * 32 + "-" + "b" * 16 + "-01"]
)
def test_a_malformed_traceparent_starts_a_trace_of_reviewers_own(
    client, agent, refund_policy, spans, traceparent
):
    body = {"task_id": "task-1", "context_id": "ctx-1", "request": approval_request()}

    response = post(client, "/api/v1/proposals", body, HTTP_TRACEPARENT=traceparent)

    assert response.status_code == 201
    intake = named(spans)["reviewer.intake"]
    assert intake.parent is None
    assert Proposal.objects.get().trace_parent.split("-")[1] == format_trace_id(intake.context.trace_id)


def test_with_traces_off_nothing_is_recorded_or_stored(client, agent, refund_policy):
    tracing.use_provider(None)
    body = {"task_id": "task-1", "context_id": "ctx-1", "request": approval_request()}

    response = post(client, "/api/v1/proposals", body, HTTP_TRACEPARENT=f"00-{AGENT_TRACE}-{AGENT_SPAN}-01")

    assert response.status_code == 201
    assert Proposal.objects.get().trace_parent == ""
    assert tracing.span("anything") is tracing.span("anything else")  # one shared no-op, nothing made


def test_the_sdk_sends_no_traceparent_without_an_active_span():
    assert trace_headers() == {}
    assert "traceparent" not in approval_request_metadata(approval_request())


def test_the_sdk_sends_the_agents_current_span():
    with TracerProvider().get_tracer("the agent").start_as_current_span("act") as current:
        headers = trace_headers()
    context = current.get_span_context()
    version, trace_id, parent_id, flags = headers["traceparent"].split("-")
    assert (version, trace_id, parent_id) == (
        "00",
        format_trace_id(context.trace_id),
        format_span_id(context.span_id),
    )
    assert int(flags, 16) & 1  # sampled


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
    ],
)
def test_traces_are_on_only_when_an_otlp_endpoint_is_configured(environ, wanted):
    assert tracing.wanted(environ) is wanted


@pytest.mark.parametrize(
    "environ",
    [
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_TRACES_EXPORTER": "zipkin"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
    ],
)
def test_an_exporter_reviewer_does_not_ship_stops_start_up(environ):
    with pytest.raises(ImproperlyConfigured):
        tracing.wanted(environ)
