"""The decision pull served on the event loop (approvals/decision_wait.py): a wait is woken by the
decision through the channel layer (no polling), follows a reviewer's edit, ends at its deadline,
never reaches the request-limited Django app, is capped per agent and per process, and refuses bad
input with the API's error shape, counting nothing."""

import asyncio
import json
import uuid

import pytest
from channels.db import database_sync_to_async
from channels.layers import channel_layers
from channels.testing import ApplicationCommunicator, HttpCommunicator

from approvals.agent_api.decision_wait import DecisionWaits
from approvals.models import Decision
from approvals.services.reconcile import expire_due
from approvals.services.votes import cast_vote, edit_proposal
from tests import factories
from tests.factories import step_up_for, totp_code
from tests.waiting import wait_until_async

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "api-secret"  # noqa: S105 (the agent fixture's API token)
TIMEOUT = 10  # seconds: an upper bound for an answer that is due, not a wait


@pytest.fixture(autouse=True)
def _own_channel_layer(settings):
    """A layer of this test's own: on Redis a prefix other runs do not share; in memory, a fresh one."""
    layer = settings.CHANNEL_LAYERS["default"]
    if "redis" in layer["BACKEND"]:
        settings.CHANNEL_LAYERS = {
            "default": {**layer, "CONFIG": {**layer["CONFIG"], "prefix": f"test-{uuid.uuid4().hex[:8]}"}}
        }
    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


class Django:
    """What stands behind the waits in reviewer/asgi.py (the limited Django app): records what reaches it."""

    def __init__(self):
        self.paths = []

    async def __call__(self, scope, receive, send):
        self.paths.append((scope["method"], scope["path"]))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})


@pytest.fixture
def django_app():
    return Django()


@pytest.fixture
def waits(django_app):
    return DecisionWaits(django_app, per_agent=3, per_process=10)


def pull(app, proposal_id, wait=0, token=TOKEN, method="GET") -> HttpCommunicator:
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    return HttpCommunicator(
        app, method, f"/api/v1/proposals/{proposal_id}/decision?wait={wait}", headers=headers
    )


async def answer_of(communicator: HttpCommunicator) -> tuple[int, dict, dict]:
    response = await communicator.get_response(timeout=TIMEOUT)
    return response["status"], json.loads(response["body"] or b"{}"), dict(response["headers"])


async def asleep(waits: DecisionWaits, proposal, count: int = 1) -> None:
    """Until `count` waits on the proposal are subscribed to its group (past their first read)."""

    async def subscribed():
        return waits.subscribed[str(proposal.id)] == count

    await wait_until_async(subscribed, f"{count} wait(s) asleep on the proposal", timeout=TIMEOUT)


@database_sync_to_async
def approve(proposal, reviewer):
    cast_vote(
        proposal.id,
        reviewer,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=step_up_for(reviewer, totp_code(reviewer)),
    )
    return Decision.objects.get(proposal=proposal).token


@database_sync_to_async
def submitted(agent):
    return factories.submit(agent)


async def test_a_wait_is_woken_by_the_reviewers_vote_with_the_decision(
    waits, django_app, agent, refund_policy, requester, reviewer_a
):
    proposal = await submitted(agent)
    waiting = pull(waits, proposal.id, wait=30)
    answer = asyncio.ensure_future(answer_of(waiting))
    await asleep(waits, proposal)

    token = await approve(proposal, reviewer_a)

    status, body, headers = await answer
    assert status == 200
    assert body == {"token": token, "state": "approved", "proposal_id": str(proposal.id)}
    assert headers[b"cache-control"] == b"no-store"
    assert django_app.paths == []  # the wait never took a request slot
    assert waits.waiting == {} and waits.subscribed == {}


async def test_a_wait_follows_a_reviewers_edit_to_the_new_proposals_decision(
    waits, agent, refund_policy, requester, reviewer_a, reviewer_b
):
    proposal = await submitted(agent)
    answer = asyncio.ensure_future(answer_of(pull(waits, proposal.id, wait=30)))
    await asleep(waits, proposal)

    edited = await database_sync_to_async(edit_proposal)(
        proposal.id,
        reviewer_a,
        arguments={**proposal.action["arguments"], "amount": "25.00"},
        digest_seen=proposal.action_digest,
        step_up=await database_sync_to_async(lambda: step_up_for(reviewer_a, totp_code(reviewer_a)))(),
    )
    await asleep(waits, edited)  # moved to the new proposal's group
    assert str(proposal.id) not in waits.subscribed
    await database_sync_to_async(cast_vote)(
        edited.id,
        reviewer_b,
        verdict="approve",
        digest_seen=edited.action_digest,
        step_up=await database_sync_to_async(lambda: step_up_for(reviewer_b, totp_code(reviewer_b)))(),
    )

    status, body, _ = await answer
    token = await database_sync_to_async(lambda: Decision.objects.get(proposal=edited).token)()
    assert (status, body) == (200, {"token": token, "state": "approved", "proposal_id": str(edited.id)})


async def test_a_wait_that_ends_first_answers_null_and_the_state(waits, agent, refund_policy, requester):
    proposal = await submitted(agent)
    status, body, _ = await answer_of(pull(waits, proposal.id, wait=1))
    assert (status, body) == (
        200,
        {"token": None, "state": "awaiting_review", "proposal_id": str(proposal.id)},
    )
    assert waits.waiting == {} and waits.subscribed == {}


async def test_a_closed_proposal_answers_at_once_without_subscribing(waits, agent, refund_policy, requester):
    proposal = await submitted(agent)
    await database_sync_to_async(expire_due)(now=proposal.expires_at)
    status, body, _ = await answer_of(pull(waits, proposal.id, wait=60))
    assert (status, body["token"], body["state"]) == (200, None, "expired")


async def test_past_the_agents_cap_a_wait_is_refused_with_429_and_other_agents_still_wait(
    waits, agent, tenant, refund_policy, requester
):
    proposal = await submitted(agent)
    held = [asyncio.ensure_future(answer_of(pull(waits, proposal.id, wait=30))) for _ in range(3)]
    await asleep(waits, proposal, count=3)

    status, body, headers = await answer_of(pull(waits, proposal.id, wait=30))

    assert status == 429 and headers[b"retry-after"] == b"5"
    assert body["error"]["code"] == "too_many_waits" and body["error"]["field"] == "wait"
    other = await database_sync_to_async(factories.make_agent)(
        tenant, "other", push_token="p2", api_token="other-secret", card_url=""
    )
    others = await submitted(other)
    other_wait = asyncio.ensure_future(answer_of(pull(waits, others.id, wait=30, token="other-secret")))
    await asleep(waits, others)  # the cap is the agent's own
    for task in [*held, other_wait]:
        task.cancel()


async def test_past_the_process_cap_a_wait_is_refused_with_503(django_app, agent, refund_policy, requester):
    waits = DecisionWaits(django_app, per_agent=5, per_process=2)
    proposal = await submitted(agent)
    held = [asyncio.ensure_future(answer_of(pull(waits, proposal.id, wait=30))) for _ in range(2)]
    await asleep(waits, proposal, count=2)
    status, body, headers = await answer_of(pull(waits, proposal.id, wait=30))
    assert (status, body["error"]["code"], headers[b"retry-after"]) == (503, "overloaded", b"5")
    for task in held:
        task.cancel()


@pytest.mark.parametrize("wait", ["61", "-1", "soon"])
async def test_a_wait_out_of_bounds_is_a_400_naming_it(waits, agent, refund_policy, requester, wait):
    proposal = await submitted(agent)
    status, body, _ = await answer_of(pull(waits, proposal.id, wait=wait))
    assert (status, body["error"]["code"], body["error"]["field"]) == (400, "invalid", "wait")
    assert waits.waiting == {}


async def test_only_the_proposals_own_agent_reads_it(waits, agent, tenant, refund_policy, requester):
    proposal = await submitted(agent)
    await database_sync_to_async(factories.make_agent)(
        tenant, "other", push_token="p2", api_token="other-secret", card_url=""
    )
    answers = [
        await answer_of(pull(waits, proposal.id, wait=30, token="other-secret")),
        await answer_of(pull(waits, proposal.id, token="wrong")),
        await answer_of(pull(waits, proposal.id, token=None)),
        await answer_of(pull(waits, "not-a-uuid")),
        await answer_of(pull(waits, uuid.uuid4(), wait=30)),
    ]
    assert [(status, body["error"]["code"]) for status, body, _ in answers] == [
        (404, "not_found"),
        (401, "unauthorized"),
        (401, "unauthorized"),
        (404, "not_found"),
        (404, "not_found"),
    ]
    assert waits.waiting == {} and waits.subscribed == {}


async def test_an_agent_that_hangs_up_frees_its_wait(waits, agent, refund_policy, requester):
    proposal = await submitted(agent)
    scope = pull(waits, proposal.id, wait=30).scope
    communicator = ApplicationCommunicator(waits, scope)
    await communicator.send_input({"type": "http.request", "body": b""})
    await asleep(waits, proposal)

    await communicator.send_input({"type": "http.disconnect"})
    await communicator.wait(timeout=TIMEOUT)

    assert waits.waiting == {} and waits.subscribed == {}


async def test_other_requests_go_to_the_django_app(waits, django_app, agent):
    proposal_id = uuid.uuid4()
    await pull(waits, proposal_id, method="POST").get_response(timeout=TIMEOUT)
    await HttpCommunicator(waits, "GET", f"/api/v1/proposals/{proposal_id}").get_response(timeout=TIMEOUT)
    assert django_app.paths == [
        ("POST", f"/api/v1/proposals/{proposal_id}/decision"),
        ("GET", f"/api/v1/proposals/{proposal_id}"),
    ]
