"""Every page shows agent text through the one rendering (the `agent_text` filter and its admin
counterpart), so no bidi, zero-width or control character an agent sent reaches a page raw.

One proposal carries such characters in every string an agent provides (summary, tool, target,
arguments, principal, agent version, consequences, diff, evidence, task, context and request ids, the
outcome it reports), with an earlier proposal on the same target and a superseded one beside it. The
test then opens, as a reviewer and as a tenant admin, every page and every named reviewer and audit
URL that takes a proposal id, and, as a superuser, the list and change view of every ModelAdmin in
the admin site's registry and every custom admin view (a policy's dry run); no response body may hold
a raw character of that kind. (The evidence PDF is binary and has its own test.)"""

import re

import pytest
from django.contrib import admin
from django.urls import NoReverseMatch, get_resolver, reverse

from approvals.models import Proposal
from approvals.services.decisions import consume_decision, record_outcome
from audit.chain.sequencer import sequence_pending
from tests import factories
from tests.factories import verified_client

pytestmark = pytest.mark.django_db

# Right-to-left override, left-to-right isolate, zero-width space, right-to-left mark, byte order mark,
# bell and escape.
HOSTILE = "\u202e\u2066\u200b\u200f\ufeff\x07\x1b"
RAW = re.compile("[\u202a-\u202e\u2066-\u2069\u200b-\u200f\ufeff\x00-\x08\x0b-\x1f]")


def hostile(text: str) -> str:
    return f"{text[:2]}{HOSTILE}{text[2:]}"


def hostile_action(order: str = "1234") -> dict:
    return {
        "tool": "payments.refund",
        "arguments": {
            "order_id": hostile(order),
            "amount": "40.00",
            "currency": "EUR",
            hostile("note"): hostile("customer says it never arrived"),
        },
        "target": f"order:{hostile(order)}",
    }


def hostile_submission(agent, task: str, **extra):
    return factories.submit(
        agent,
        task_id=hostile(task),
        context_id=hostile("ctx-1"),
        summary=hostile("Refund EUR 40.00 to order 1234"),
        principal_id=hostile("customer-7"),
        agent_version=hostile("refund-agent@1"),
        consequences={
            "effect": hostile("Money leaves"),
            "amount": "40.00",
            hostile("why"): hostile("because"),
        },
        diff=[{"field": hostile("order.refunded"), "before": hostile("0.00"), "after": hostile("40.00")}],
        evidence=[
            {
                "title": hostile("Support ticket"),
                "url": f"https://support.example.test/{HOSTILE}t/1",
                "excerpt": hostile("never arrived"),
            }
        ],
        **extra,
    )


@pytest.fixture
def hostile_world(tenant, agent, refund_policy, requester, reviewer_a, reviewer_b):
    # An earlier proposal on the same target, approved and reported on with hostile text.
    earlier, decision = factories.approve(
        agent, reviewer_a, **_submission_kwargs(agent, request_id=hostile("req-earlier"))
    )
    consume_decision(agent, decision.jti, rev=decision.rev)
    record_outcome(
        agent, decision.jti, status="failed", transaction_id=hostile("tx-1"), detail=hostile("card declined")
    )
    # One superseded by another (both hostile), and the one awaiting review.
    first = hostile_submission(agent, "task-1", request_id=hostile("req-first"), action=hostile_action())
    hostile_submission(
        agent,
        "task-1",
        request_id=hostile("req-second"),
        action=hostile_action(),
        supersedes=first.request_id,
    )
    # A tool name an agent made up (no policy names it: the default outcome).
    factories.submit(
        agent, action={**hostile_action(), "tool": hostile("payments.refund")}, summary=hostile("odd")
    )
    sequence_pending()  # what the on-commit hook does outside a test's transaction
    return Proposal.objects.filter(tenant=tenant)


def _submission_kwargs(agent, **extra) -> dict:
    return {
        "action": hostile_action(),
        "summary": hostile("Refund EUR 40.00 to order 1234"),
        "agent_version": hostile("refund-agent@1"),
        "consequences": {"effect": hostile("Money leaves"), "amount": "40.00"},
        "evidence": [
            {"title": hostile("Ticket"), "url": "https://support.example.test/t/1", "excerpt": hostile("x")}
        ],
        **extra,
    }


def proposal_urls(proposal) -> list[str]:
    """Every named URL of the reviewer and audit pages that takes a proposal id (GET; a POST-only view
    answers 405 with its own small body, checked too)."""
    urls = []
    resolver = get_resolver()
    for namespace in ("approvals", "audit", "sso"):
        app_resolver = resolver.namespace_dict[namespace][1]
        for name in app_resolver.reverse_dict:
            if not isinstance(name, str) or name == "evidence_pdf":
                continue
            for kwargs in (
                {"proposal_id": proposal.id},
                {"proposal_id": proposal.id, "tenant": proposal.tenant.slug},
            ):
                try:
                    urls.append(reverse(f"{namespace}:{name}", kwargs=kwargs))
                    break
                except NoReverseMatch:
                    continue
    return urls


def raw_characters(client, urls: list[str]) -> list[tuple[str, str]]:
    """(url, what surrounds the first raw character) for every page that shows one."""
    found = []
    for url in urls:
        response = client.get(url)
        assert response.status_code < 500, (url, response.status_code)
        body = response.content.decode("utf-8")
        match = RAW.search(body)
        if match is not None:
            found.append((url, body[max(match.start() - 120, 0) : match.end() + 40]))
    return found


def reviewer_pages(tenant, proposals) -> list[str]:
    pages = [
        reverse("approvals:queue"),
        reverse("approvals:queue") + "?all=1",
        reverse("approvals:watching"),
        reverse("approvals:break_glass_oversight"),
        reverse("audit:index"),
        reverse("audit:tenant", args=[tenant.slug]),
        reverse("audit:events", args=[tenant.slug]),
        reverse("audit:events", args=[tenant.slug]) + "?subject=proposal",
        reverse("audit:metrics", args=[tenant.slug]) + "?days=7",
        reverse("audit:export", args=[tenant.slug]),
    ]
    for proposal in proposals:
        pages.extend(proposal_urls(proposal))
    return pages


@pytest.mark.parametrize("persona", ["reviewer_a", "admin_user"])
def test_no_reviewer_or_audit_page_shows_a_raw_control_character(hostile_world, tenant, persona, request):
    client = verified_client(request.getfixturevalue(persona))
    assert raw_characters(client, reviewer_pages(tenant, hostile_world)) == []


def test_no_admin_page_shows_a_raw_control_character(hostile_world, tenant):
    client = verified_client(factories.policy_admins()[0])
    urls = [reverse("admin:index")]
    for model in admin.site._registry:
        info = (model._meta.app_label, model._meta.model_name)
        urls.append(reverse("admin:{}_{}_changelist".format(*info)))
        for pk in model._default_manager.order_by("-pk").values_list("pk", flat=True)[:6]:
            urls.append(reverse("admin:{}_{}_change".format(*info), args=[pk]))
        if model._meta.model_name == "policyversion":
            for pk in model._default_manager.values_list("pk", flat=True):
                urls.append(reverse("admin:approvals_policyversion_dry_run", args=[pk]))
    assert raw_characters(client, urls) == []


def test_the_edit_form_keeps_a_hidden_character_as_a_reference_and_says_where_it_is(
    agent, refund_policy, reviewer_a
):
    """A value the reviewer leaves alone must be submitted as the agent sent it: the browser turns
    &#x200B; back into U+200B. Beside the field, the plain-text form shows where it is."""
    action = factories.refund_action()
    action["arguments"]["account"] = "DE00\u200b1234"
    proposal = factories.submit(agent, action=action)

    page = verified_client(reviewer_a).get(reverse("approvals:edit", args=[proposal.id])).content.decode()

    assert 'value="DE00&#x200B;1234"' in page
    assert "The agent&#x27;s value holds hidden characters: DE00[U+200B]1234" in page
    assert RAW.search(page) is None
