"""One tenant's policy never releases another tenant's action.

The attack: tenant globex's refund agent parks a EUR 60.00 refund that globex's policy sends to finance.
Tenant acme registers an agent with the same card URL (so the same default audience) and an allow
policy with `consume_online: false`. Before, the worker's ListTasks pass adopted globex's parked task
into acme, acme's policy signed a decision, and globex's strictly verifying agent executed it. Each of
the three layers below refuses it on its own:

1. registration: a card URL or an audience another agent (of any tenant) has is refused;
2. reconciliation: a parked task is adopted only into the registration its request names, even when
   two registrations reach the same agent (shown with a row that the registration check never saw);
3. the gate: an agent that knows its tenant refuses a decision signed for another one.
"""

import asyncio

import jwt
import pytest
from a2a.types import TaskState
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from django.utils import timezone

from approvals.a2a.client import forget_cards
from approvals.a2a.parked_tasks import ParkedTaskLister
from approvals.models import Agent, Decision, PolicyVersion, Proposal
from approvals.schemas import ProposalSubmission
from approvals.services.agents import register_agent, update_agent
from approvals.services.intake import submit_proposal
from approvals.states import State
from approvals.worker.loop import TickReport
from lib.errors import Conflict, IntakeError
from reviewer_gate import gate
from tests import factories
from tests.approvals.fake_agent import FakeAgent
from tests.examples.harness import AgentClient, AgentProcess
from tests.factories import submit

pytestmark = pytest.mark.django_db

CARD_URL = "https://refunds.globex.example/.well-known/agent-card.json"
REFUND = {"tool": "payments.refund", "arguments": {"order_id": "1182", "amount": "60.00", "currency": "EUR"}}


@pytest.fixture
def globex():
    return factories.make_tenant("globex", "Globex Retail")


@pytest.fixture
def acme():
    return factories.make_tenant("acme", "Acme Payments")


def register(tenant, slug, card_url, audience=""):
    return register_agent(
        tenant=tenant,
        slug=slug,
        name=slug,
        card_url=card_url,
        audience=audience,
        push_token=f"push-{slug}",
        api_token=f"api-{slug}",
    )


def acme_allows_everything_offline(acme):
    factories.make_policy(
        acme, "allow-all", outcome=PolicyVersion.Outcome.ALLOW, thresholds=[], consume_online=False
    )


# --- 1. registration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spelling",
    [
        CARD_URL,
        "HTTPS://Refunds.Globex.example/.well-known/agent-card.json",
        "https://refunds.globex.example:443/.well-known/agent-card.json",
        "https://refunds.globex.example/.well-known/agent-card.json/",
    ],
)
def test_another_tenant_cannot_register_an_agent_at_a_card_url_already_registered(globex, acme, spelling):
    register(globex, "globex-refunds", CARD_URL)

    with pytest.raises(Conflict) as refused:
        register(acme, "acme-refunds", spelling)

    assert refused.value.code == "card_url_taken" and refused.value.field == "card_url"
    assert "globex" not in refused.value.message.replace(spelling, "")  # nothing of the other tenant's agent
    assert not Agent.objects.filter(slug="acme-refunds").exists()


def test_another_tenant_cannot_take_an_agents_audience(globex, acme):
    register(globex, "globex-refunds", CARD_URL)  # audience: the card URL

    with pytest.raises(Conflict) as refused:
        register(acme, "acme-refunds", "https://acme.example/.well-known/agent-card.json", audience=CARD_URL)

    assert refused.value.code == "audience_taken" and refused.value.field == "audience"
    assert not Agent.objects.filter(slug="acme-refunds").exists()


@pytest.mark.parametrize(
    ("taken", "spelling"),
    [
        ("urn:agent:refunds", "urn:agent:refunds/"),
        ("urn:agent:refunds/", "urn:agent:refunds"),
        ("urn:agent:refunds", "URN:Agent:refunds"),
        ("urn:agent:refunds", " urn:agent:refunds// "),
        ("refunds", "refunds/"),
    ],
)
def test_an_audience_spelled_with_a_trailing_slash_or_another_case_is_the_same_audience(
    globex, acme, taken, spelling
):
    register(globex, "globex-refunds", "", audience=taken)  # a pull agent: its audience is all it has

    with pytest.raises(Conflict) as refused:
        register(acme, "acme-refunds", "", audience=spelling)

    assert refused.value.code == "audience_taken" and refused.value.field == "audience"
    assert not Agent.objects.filter(slug="acme-refunds").exists()


def test_a_urns_specific_part_keeps_its_case(globex, acme):
    register(globex, "globex-refunds", "", audience="urn:agent:refunds")

    assert register(acme, "acme-refunds", "", audience="urn:agent:Refunds").audience == "urn:agent:Refunds"


def test_a_taken_card_url_or_audience_does_not_name_another_tenants_agent(globex, acme):
    register(globex, "globex-refunds", CARD_URL, audience="urn:agent:globex-refunds")
    acme_agent = register(acme, "acme-refunds", "https://acme.example/.well-known/agent-card.json")

    attempts = [
        lambda: register(acme, "acme-other", CARD_URL, audience="urn:agent:acme-other"),
        lambda: register(acme, "acme-other", "", audience="urn:agent:globex-refunds"),
        lambda: update_agent(acme_agent, card_url=CARD_URL),
        lambda: update_agent(acme_agent, audience="urn:agent:globex-refunds"),
    ]
    for attempt in attempts:
        with pytest.raises(Conflict) as refused:
            attempt()
        assert refused.value.code in {"card_url_taken", "audience_taken"}
        assert "agent 'globex-refunds'" not in refused.value.message
        assert "is already another agent's" in refused.value.message


def test_a_taken_card_url_names_the_agent_of_the_same_tenant(acme):
    register(acme, "acme-refunds", CARD_URL)

    with pytest.raises(Conflict, match="is already agent 'acme-refunds''s"):
        register(acme, "acme-other", CARD_URL)


def test_an_agent_cannot_be_changed_to_another_agents_card_url_or_audience(globex, acme):
    register(globex, "globex-refunds", CARD_URL)
    acme_agent = register(acme, "acme-refunds", "https://acme.example/.well-known/agent-card.json")

    for changes, code in [
        ({"card_url": CARD_URL}, "card_url_taken"),
        ({"audience": CARD_URL}, "audience_taken"),
    ]:
        with pytest.raises(Conflict) as refused:
            update_agent(acme_agent, **changes)
        assert refused.value.code == code

    acme_agent.refresh_from_db()
    assert acme_agent.card_url == acme_agent.audience == "https://acme.example/.well-known/agent-card.json"


def test_the_database_refuses_a_second_agent_with_the_same_card_url_or_audience(globex, acme):
    register(globex, "globex-refunds", CARD_URL)
    for fields in [
        {"card_url": CARD_URL, "audience": "urn:agent:acme"},
        {"card_url": "https://acme.example/.well-known/agent-card.json", "audience": CARD_URL},
    ]:
        with pytest.raises(IntegrityError), transaction.atomic():
            Agent.objects.create(tenant=acme, slug="acme-refunds", name="x", **fields)


def test_the_register_agent_command_refuses_a_card_url_already_registered(globex, acme):
    register(globex, "globex-refunds", CARD_URL)

    with pytest.raises(CommandError, match="already another agent's"):
        call_command(
            "register_agent",
            *("--tenant", "acme", "--slug", "acme-refunds", "--name", "Acme refunds"),
            *("--card-url", CARD_URL),
        )


# --- 2. reconciliation --------------------------------------------------------------------------


@pytest.fixture
def globex_agent_process(request, tmp_path):
    """The real refund agent of tenant globex, naming its registration in its requests unless the test
    asks for it "anonymous" (indirect parametrization). It never POSTs them (Reviewer learns of them only
    by ListTasks); nothing answers at its Reviewer URL, and parking needs none."""
    anonymous = getattr(request, "param", "") == "anonymous"
    names = [] if anonymous else ["--agent-slug", "globex-refunds"]
    process = AgentProcess(
        state_dir=tmp_path / "globex-agent",
        reviewer_url=FakeAgent.closed_port_url(),
        extra_args=[*names, "--tenant", "globex", "--no-rest-intake"],
    ).start()
    yield process
    process.stop()


def acme_registration_reaching(acme, process) -> Agent:
    """acme's registration at globex's agent: a spelling of its card URL the registration check cannot
    tell apart (another query string), with globex's audience, written straight to the table (so this
    layer is shown to hold without the first)."""
    return Agent.objects.create(
        tenant=acme,
        slug="acme-refunds",
        name="Acme refunds",
        card_url=f"{process.audience}?acme",
        audience=process.audience,
        push_token_hash="-",
        api_token_hash="-",
    )


def park_refund(process) -> str:
    async def run():
        client = await AgentClient.connect(process.url)
        try:
            task = await client.ask_refund(
                "Please refund EUR 60.00 for order 1182 (customer says the parcel never arrived)",
                principal={"id": "requester", "display": "Rita Requester"},
            )
            parked = await client.wait_for(
                task.id, lambda t: t.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
            )
            return parked.id
        finally:
            await client.close()

    return asyncio.run(run())


@pytest.fixture
def loopback_agents(settings):
    settings.AGENT_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]
    forget_cards()
    yield
    forget_cards()


def test_a_parked_task_found_at_the_card_url_is_not_adopted_into_another_tenants_registration(
    globex, acme, globex_agent_process, loopback_agents
):
    task_id = park_refund(globex_agent_process)
    acme_allows_everything_offline(acme)
    factories.make_policy(globex, "refunds", tool_pattern="payments.refund")  # finance decides
    acme_agent = acme_registration_reaching(acme, globex_agent_process)
    lister = ParkedTaskLister(every_seconds=60)

    lister.list_agent(acme_agent, timezone.now())

    assert not Proposal.objects.filter(task_id=task_id).exists()
    assert not Decision.objects.exists()
    assert lister.turns[acme_agent.id].failures == 0  # it did list the task, and left it
    assert any(key[:2] == (acme_agent.id, task_id) for key in lister.refused)

    # The registration the request names adopts it, under its own tenant's policy.
    globex_agent = register(globex, "globex-refunds", globex_agent_process.audience + "?globex")
    report = TickReport()
    lister.reconcile(report, timezone.now())
    proposal = Proposal.objects.get(task_id=task_id)
    assert (proposal.agent, proposal.tenant, proposal.state) == (globex_agent, globex, State.AWAITING_REVIEW)


@pytest.mark.parametrize("globex_agent_process", ["anonymous"], indirect=True)
def test_a_parked_task_whose_request_names_no_registration_is_adopted_by_none(
    globex, acme, globex_agent_process, loopback_agents
):
    # What an agent without `agent` (an older SDK) parks: before, acme's allow policy released it.
    task_id = park_refund(globex_agent_process)
    acme_allows_everything_offline(acme)
    acme_agent = acme_registration_reaching(acme, globex_agent_process)
    globex_agent = register(globex, "globex-refunds", globex_agent_process.audience + "?globex")
    lister = ParkedTaskLister(every_seconds=60)

    lister.reconcile(TickReport(), timezone.now())

    assert not Decision.objects.exists()  # before: acme's allow policy signed globex's refund
    assert not Proposal.objects.exists()
    assert {key[:2] for key in lister.refused} == {(acme_agent.id, task_id), (globex_agent.id, task_id)}


def test_a_request_naming_another_registration_is_refused_at_intake(globex):
    agent = register(globex, "globex-refunds", CARD_URL)

    body = {"task_id": "task-1", "request": factories.approval_request(agent="acme-refunds")}

    with pytest.raises(IntakeError) as refused:
        submit_proposal(agent, ProposalSubmission.model_validate(body), via="test")

    assert refused.value.code == "wrong_agent" and refused.value.field == "request.agent"
    assert not Proposal.objects.exists()


# --- 3. the gate --------------------------------------------------------------------------------


def test_a_gate_that_knows_its_tenant_refuses_a_decision_signed_for_another_tenant(client, acme):
    # acme's registration holds globex's agent's audience (the first two layers bypassed: it is the only
    # agent here), and acme's allow policy signs the refund at once, with no online consume.
    acme_allows_everything_offline(acme)
    acme_agent = register(acme, "acme-refunds", CARD_URL)
    proposal = submit(acme_agent, action=REFUND)
    token = Decision.objects.get(proposal=proposal).token
    jwks = client.get("/.well-known/jwks.json").json()

    def globex_gate(**tenant):
        return gate.Gate(
            issuer=jwt.decode(token, options={"verify_signature": False})["iss"],
            audience=CARD_URL,
            keys=gate.StaticKeySource(jwks),
            used_store=gate.MemoryUsedStore(),
            **tenant,
        )

    binding = {
        "task_id": proposal.task_id,
        "request_id": proposal.request_id,
        "action_digest": proposal.action_digest,
    }
    with pytest.raises(gate.GateError) as refused:
        globex_gate(tenant="globex").verify(token, **binding)
    assert refused.value.code == "wrong_tenant"
    # What the tenant check adds: without it the same token verifies, and the agent would act.
    assert globex_gate().verify(token, **binding).approved
