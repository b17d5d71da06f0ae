"""The compliance pages over HTTP: who may read and export (compliance, admin), who may not (reviewers,
other tenants, unverified sessions), and that compliance reads but never votes."""

import hashlib
import io
import json
import re

import pytest
from django.db import transaction
from django.test import Client
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from approvals.models import Vote
from audit.chain.accept import append
from audit.chain.checkpoints import checkpoint_head
from audit.exports import jobs
from audit.labels import tenant_chain
from audit.models import AuditEvent, ExportJob, Verb
from tenants.models import TenantMembership
from tests.audit.util import lifecycle, tenant_ref, verified_client
from tests.factories import make_user, submit, totp_code, trail_name

pytestmark = pytest.mark.django_db


@pytest.fixture
def decided(agent, refund_policy, requester, reviewer_a):
    return lifecycle(agent, reviewer_a)


def url(name, **kwargs) -> str:
    return reverse(f"audit:{name}", kwargs={"tenant": "acme", **kwargs})


def export(client, **fields):
    return client.post(url("export"), {"format": "csv", **fields})


# --- access ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tenant", "events", "metrics"])
def test_compliance_and_admin_open_the_audit_pages(decided, compliance, admin_user, name):
    for user in (compliance, admin_user):
        response = verified_client(user).get(url(name))
        assert response.status_code == 200
        assert b"Acme Payments" in response.content


@pytest.mark.parametrize("name", ["tenant", "events"])
def test_a_reviewer_gets_404_on_exports_and_events(decided, reviewer_a, name):
    assert verified_client(reviewer_a).get(url(name)).status_code == 404
    assert export(verified_client(reviewer_a)).status_code == 404


def test_a_reviewer_may_see_their_tenants_metrics(decided, reviewer_a):
    response = verified_client(reviewer_a).get(url("metrics"))
    assert response.status_code == 200
    assert b"Chain &amp; exports" not in response.content  # no links to what they may not open


def test_compliance_of_another_tenant_gets_404(decided, other_tenant):
    stranger = make_user("globex_compliance", tenant=other_tenant, role=TenantMembership.Role.COMPLIANCE)
    client = verified_client(stranger)
    for name in ("tenant", "events", "metrics"):
        assert client.get(url(name)).status_code == 404
    assert export(client).status_code == 404
    assert client.get(url("evidence", proposal_id=decided.id)).status_code == 404
    assert client.get(url("evidence_json", proposal_id=decided.id)).status_code == 404


def test_a_session_without_a_one_time_code_is_sent_to_sign_in(decided, compliance):
    client = Client()
    client.force_login(compliance)  # password only: is_verified() is false
    response = client.get(url("tenant"))
    assert response.status_code == 302 and reverse("login") in response["Location"]
    assert export(client).status_code == 302
    assert Client().get(url("tenant")).status_code == 302


def test_an_htmx_poll_of_an_expired_session_redirects_the_whole_page(decided, tenant, compliance):
    job = jobs.create_export(tenant_ref(tenant), user=compliance, kind="pdf", filters={})
    response = Client().get(url("export_job", job_id=job.id), HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and reverse("login") in response["HX-Redirect"]


@pytest.mark.parametrize(
    ("name", "method"), [("tenant", "post"), ("events", "post"), ("export", "get"), ("metrics", "post")]
)
def test_audit_pages_refuse_the_wrong_method(decided, compliance, name, method):
    assert getattr(verified_client(compliance), method)(url(name)).status_code == 405


def test_the_audit_index_sends_a_one_tenant_user_to_their_tenant(decided, compliance, reviewer_a):
    assert verified_client(compliance).get(reverse("audit:index"))["Location"] == url("tenant")
    assert verified_client(reviewer_a).get(reverse("audit:index"))["Location"] == url("metrics")


# --- compliance reads, never votes ----------------------------------------------------------------


def test_compliance_cannot_vote_over_http(agent, refund_policy, requester, reviewer_a, compliance):
    proposal = submit(agent)
    response = verified_client(compliance).post(
        reverse("approvals:decide", kwargs={"proposal_id": proposal.id}),
        {"action": "approve", "digest": proposal.action_digest, "otp_code": totp_code(compliance)},
    )
    assert response.status_code == 403
    assert not Vote.objects.filter(proposal=proposal).exists()
    proposal.refresh_from_db()
    assert proposal.state == "awaiting_review"
    refused = AuditEvent.objects.get(verb=Verb.VOTE_REFUSED, actor=trail_name("compliance"))
    assert refused.data["code"] == "not_eligible"


def test_compliance_can_export_over_http(decided, compliance):
    response = export(verified_client(compliance))
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith('attachment; filename="audit-acme-')
    body = b"".join(response.streaming_content).decode()
    assert body.startswith("seq,at,chain,actor,verb,subject,data,prev_hash,hash")
    event = AuditEvent.objects.get(verb=Verb.EXPORT_CREATED)
    assert event.actor == trail_name("compliance") and event.data["delivery"] == "stream"
    # the header, everything up to the request, then the signed head
    assert len(body.strip().splitlines()) == 1 + event.seq + 1
    assert body.strip().splitlines()[-1].startswith("export_head,")


# --- exports over HTTP ----------------------------------------------------------------------------


def test_a_large_export_runs_in_the_background_with_a_progress_bar_then_a_download(
    decided, compliance, settings
):
    settings.AUDIT_EXPORT_STREAM_MAX_EVENTS = 1
    client = verified_client(compliance)
    response = export(client, format="jsonl")
    job = ExportJob.objects.get()
    assert response.status_code == 302 and response["Location"] == url("export_job", job_id=job.id)

    page = client.get(response["Location"])
    assert b"<progress" in page.content and b'hx-trigger="every 1s"' in page.content
    assert b'<label for="export-progress-bar">' in page.content
    poll = client.get(response["Location"], HTTP_HX_REQUEST="true")
    assert poll.content.lstrip().startswith(b'<section id="export-progress"')
    assert b"0%" in poll.content

    jobs.run_pending_exports(budget_seconds=10)
    done = client.get(response["Location"], HTTP_HX_REQUEST="true")
    assert b"hx-trigger" not in done.content  # polling stops
    assert b"Download" in done.content and b'hx-swap-oob="true"' in done.content
    download = client.get(url("export_download", job_id=job.id))
    content = b"".join(download.streaming_content)
    job.refresh_from_db()
    assert hashlib.sha256(content).hexdigest() == job.sha256
    assert download["X-Content-SHA256"] == job.sha256
    lines = [json.loads(line) for line in content.splitlines()]
    assert [line["seq"] for line in lines[:-1]] == list(range(1, job.up_to_seq + 1))
    assert lines[-1]["export_head"]["seq"] == job.up_to_seq


def test_under_asgi_an_export_streams_from_an_async_iterator_instead_of_a_buffered_list(decided, tenant):
    """Django reads a sync iterator into a list before serving it under ASGI; the export must not."""
    from asgiref.sync import async_to_sync
    from django.core.handlers.asgi import ASGIRequest

    from audit.exports.lines import Selection, chunks
    from audit.web import views

    request = ASGIRequest({"type": "http", "method": "POST", "path": "/", "headers": []}, io.BytesIO())
    pages = chunks(Selection.for_tenant(tenant_ref(tenant)), "jsonl", page_size=3)
    response = views._streaming(request, pages, "application/jsonl", "x.jsonl")
    assert response.is_async

    async def consume():
        return [part async for part in response]

    parts = async_to_sync(consume)()
    assert len(parts) > 3  # one part per page, as they are read
    events = AuditEvent.objects.filter(chain=f"tenant:{tenant.id}").count()
    assert b"".join(parts).count(b"\n") == events + 1  # and the signed head


def test_another_tenants_export_job_is_404(decided, tenant, compliance, other_tenant):
    job = jobs.create_export(tenant_ref(tenant), user=compliance, kind="csv", filters={})
    stranger = make_user("globex_compliance", tenant=other_tenant, role=TenantMembership.Role.COMPLIANCE)
    client = verified_client(stranger)
    path = reverse("audit:export_job", kwargs={"tenant": "globex", "job_id": job.id})
    assert client.get(path).status_code == 404
    assert client.get(url("export_job", job_id=job.id)).status_code == 404


def test_an_invalid_export_form_is_shown_again_with_its_errors(decided, compliance):
    response = export(verified_client(compliance), since="2026-02-01", until="2026-01-01")
    assert response.status_code == 400
    assert b"before its start" in response.content


def test_the_events_page_lists_the_trail_newest_first_with_a_fixed_number_of_queries(
    decided, compliance, django_assert_max_num_queries, agent, reviewer_b
):
    client = verified_client(compliance)
    client.get(url("events"))  # warm the session
    with django_assert_max_num_queries(8):
        first = client.get(url("events"))
    lifecycle(agent, reviewer_b)
    with django_assert_max_num_queries(8):
        second = client.get(url("events"))
    assert first.status_code == second.status_code == 200
    assert second.content.count(b"<tr>") > first.content.count(b"<tr>")


# --- evidence --------------------------------------------------------------------------------------


def test_the_evidence_packet_json_holds_envelope_votes_token_delivery_consumption_and_outcome(
    decided, compliance
):
    checkpoint_head(f"tenant:{decided.tenant_id}")  # what the worker does within AUDIT_CHECKPOINT_SECONDS
    response = verified_client(compliance).get(url("evidence_json", proposal_id=decided.id))
    assert response.status_code == 200
    packet = json.loads(response.content)
    assert packet["proposal"]["envelope"]["action"] == decided.action
    assert packet["shown"]["action_digest"] == decided.action_digest
    vote = packet["votes"][0]
    assert vote["reviewer"] == trail_name("reviewer_a") and vote["name"] == "Alice"
    assert vote["counted_in_group"] == "finance" and vote["authentication"]["method"] == "totp"
    assert vote["page_hash"] == "sha256:" + "ab" * 32
    # The hash and the checked claims, never the token (a bearer credential until used or expired).
    assert "token" not in packet["decision"] and decided.decision.token not in response.content.decode()
    assert packet["decision"]["token_sha256"] == hashlib.sha256(decided.decision.token.encode()).hexdigest()
    assert packet["decision"]["token_check"]["claims"]["jti"] == str(decided.decision.jti)
    assert packet["deliveries"]["outbox"][0]["kind"] == "continue"
    assert packet["consumption"][0]["verb"] == "decision.consumed"
    assert packet["outcome"]["reports"][0]["data"]["status"] == "succeeded"
    assert all(value is True for value in packet["checks"].values()), packet["checks"]
    assert AuditEvent.objects.filter(verb=Verb.EXPORT_CREATED, data__kind="evidence_json").exists()


def test_the_evidence_packet_pdf_and_page_render(decided, compliance):
    client = verified_client(compliance)
    pdf = client.get(url("evidence_pdf", proposal_id=decided.id))
    assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF")
    page = client.get(url("evidence", proposal_id=decided.id))
    assert page.status_code == 200 and decided.action_digest.encode() in page.content
    assert decided.decision.token.encode() not in page.content  # the hash only, as in the JSON


def test_a_reviewer_cannot_download_an_evidence_packet(decided, reviewer_a):
    assert verified_client(reviewer_a).get(url("evidence_json", proposal_id=decided.id)).status_code == 404


# --- Prometheus ------------------------------------------------------------------------------------


def test_the_prometheus_endpoint_is_off_without_a_token(decided, settings):
    settings.METRICS_TOKEN = ""
    assert Client().get(reverse("audit:prometheus")).status_code == 404


def test_the_prometheus_endpoint_needs_the_bearer_token(decided, settings):
    settings.METRICS_TOKEN = "scrape-secret"
    assert Client().get(reverse("audit:prometheus")).status_code == 401
    wrong = Client().get(reverse("audit:prometheus"), HTTP_AUTHORIZATION="Bearer nope")
    assert wrong.status_code == 401 and wrong["WWW-Authenticate"].startswith("Bearer")


def test_the_prometheus_endpoint_exposes_the_counters_without_personal_identifiers(decided, settings):
    settings.METRICS_TOKEN = "scrape-secret"
    response = Client().get(reverse("audit:prometheus"), HTTP_AUTHORIZATION="Bearer scrape-secret")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    text = response.content.decode()
    families = {family.name: family for family in text_string_to_metric_families(text)}  # valid exposition
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in families.values()
        for sample in family.samples
    }
    assert samples[("reviewer_proposals_total", (("tenant", "acme"),))] == 1
    by_policy = (("outcome", "approved"), ("policy", "refunds@1"), ("tenant", "acme"))
    assert samples[("reviewer_outcomes_by_policy_total", by_policy)] == 1
    by_tool = (("outcome", "approved"), ("tenant", "acme"), ("tool", "payments.refund"))
    assert samples[("reviewer_outcomes_by_tool_total", by_tool)] == 1
    assert samples[("reviewer_time_to_decision_seconds_count", (("tenant", "acme"),))] == 1
    assert families["reviewer_time_to_decision_seconds"].type == "summary"
    assert any(
        name == "reviewer_audit_chain_head" and labels[0][1].startswith("tenant:") for name, labels in samples
    )
    for person in ("reviewer_a", "Alice", "requester"):
        assert not re.search(rf"\b{person}\b", text)


def test_a_finished_bundle_page_names_the_file_the_download_saves(decided, tenant, compliance):
    job = jobs.run_export(jobs.create_export(tenant_ref(tenant), user=compliance, kind="bundle", filters={}))
    client = verified_client(compliance)
    page = client.get(url("export_job", job_id=job.id)).content.decode()
    download = client.get(url("export_download", job_id=job.id))
    filename = download["Content-Disposition"].split('filename="')[1].rstrip('"')
    assert filename.startswith("audit-acme-") and filename.endswith(".zip")
    assert f"reviewer-verify {filename}" in page


def test_the_evidence_page_shows_structured_data_as_json_not_python(decided, compliance):
    html = verified_client(compliance).get(url("evidence", proposal_id=decided.id)).content.decode()
    assert "&quot;reversible&quot;: false" in html  # JSON, escaped by the template
    assert "&#x27;reversible&#x27;" not in html and "False" not in html


def test_a_signed_decision_event_names_what_was_decided_for_the_report(decided):
    from audit.models import AuditEvent, Verb

    signed = AuditEvent.objects.get(subject=f"proposal:{decided.id}", verb=Verb.DECISION_SIGNED)
    assert signed.data["tool"] == "payments.refund"
    assert signed.data["summary"] == decided.summary
    assert signed.data["amount"] == "EUR 40.00"


# --- pending events -------------------------------------------------------------------------------


def _accept_one_event_not_chained(tenant):
    with transaction.atomic():  # the test's own transaction: no after-commit hook chains it
        append(tenant_chain(tenant.id), actor="system", verb=Verb.HALT_STARTED, subject="halt:1")


def test_the_chain_panel_says_when_events_wait_to_be_chained_and_when_no_worker_chains_them(
    decided, tenant, compliance, settings
):
    page = verified_client(compliance).get(url("tenant")).content.decode()
    assert "not chained yet" not in page and "being chained" not in page

    _accept_one_event_not_chained(tenant)
    page = verified_client(compliance).get(url("tenant")).content.decode()
    assert "1 newer event accepted and being chained." in page

    settings.AUDIT_PENDING_ALERT_SECONDS = -1  # the oldest pending event is past the alert age
    page = verified_client(compliance).get(url("tenant")).content.decode()
    assert "1 event accepted but not chained yet" in page and "manage.py run_worker" in page
