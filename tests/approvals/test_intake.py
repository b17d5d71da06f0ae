"""Intake: `submit_proposal` recomputes the digest (RFC 8785 + SHA-256) and refuses a mismatch naming the
field; the same request twice is one proposal; malformed bodies fail in the pydantic schema with clear
errors; oversized or otherwise refused requests leave nothing half-saved."""

import hashlib
import json
from datetime import timedelta

import pytest
import rfc8785
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from accounts.stepup import step_up_for
from approvals.canonical import action_digest
from approvals.models import Decision, OutboxMessage, Proposal
from approvals.schemas import ProposalSubmission
from approvals.services.halts import halt
from approvals.services.intake import submit_proposal
from approvals.services.reconcile import expire_due
from approvals.services.votes import cast_vote, request_info
from approvals.states import State
from audit.models import AuditEvent
from lib.errors import HaltedError, IntakeError
from tests import factories
from tests.factories import fresh_step_up

pytestmark = pytest.mark.django_db


def body(task_id="task-1", **request_kwargs) -> dict:
    return {
        "task_id": task_id,
        "context_id": "ctx-1",
        "request": factories.approval_request(**request_kwargs),
    }


def submit_body(agent, data: dict) -> tuple[Proposal, bool]:
    return submit_proposal(agent, ProposalSubmission.model_validate(data), via="test")


def rows() -> tuple[int, int, int, int]:
    return (
        Proposal.objects.count(),
        Decision.objects.count(),
        OutboxMessage.objects.count(),
        AuditEvent.objects.count(),
    )


def refusal(agent, data: dict) -> IntakeError:
    before = rows()
    with pytest.raises(IntakeError) as refused:
        submit_body(agent, data)
    assert rows() == before, "a refused request must leave nothing behind"
    return refused.value


# ---------------------------------------------------------------------------------------------------
# The digest


def test_intake_stores_the_canonical_action_and_its_recomputed_digest(agent, refund_policy, requester):
    data = body()

    proposal, created = submit_body(agent, data)

    assert created
    canonical = rfc8785.dumps(data["request"]["action"])
    assert proposal.action_canonical == canonical.decode()
    assert proposal.action_digest == "sha256:" + hashlib.sha256(canonical).hexdigest()
    assert proposal.state == State.AWAITING_REVIEW


def test_a_digest_that_does_not_match_the_action_is_refused_naming_the_field(agent, refund_policy, requester):
    data = body()
    data["request"]["action"]["arguments"]["amount"] = "4000.00"  # the digest still covers 40.00

    error = refusal(agent, data)

    assert error.code == "digest_mismatch"
    assert error.field == "request.action_digest"
    assert "RFC 8785" in error.message
    assert action_digest(data["request"]["action"]) in error.message
    assert error.as_dict()["error"]["field"] == "request.action_digest"


def test_a_digest_of_non_canonical_json_is_refused(agent, refund_policy, requester):
    data = body()
    pretty = json.dumps(data["request"]["action"], indent=2).encode()
    data["request"]["action_digest"] = "sha256:" + hashlib.sha256(pretty).hexdigest()

    assert refusal(agent, data).code == "digest_mismatch"


def test_an_action_json_cannot_carry_is_refused(agent, refund_policy, requester):
    data = body()
    # Outside the arguments (where any number is refused by the schema); the HTTP paths refuse NaN even
    # earlier (test_hostile_input.py): this is the service's own guard.
    data["request"]["action"]["limit"] = float("nan")

    error = refusal(agent, data)

    assert error.code == "bad_action"
    assert error.field == "request.action"


def test_an_integer_beyond_what_json_numbers_carry_exactly_is_refused(agent, refund_policy, requester):
    data = body()
    data["request"]["action"]["cents"] = 2**53 + 1

    assert refusal(agent, data).code == "bad_action"


# ---------------------------------------------------------------------------------------------------
# Idempotency


def test_the_same_request_twice_is_one_proposal(agent, refund_policy, requester):
    data = body(request_id="r-1")

    first, created_first = submit_body(agent, data)
    second, created_second = submit_body(agent, data)

    assert (created_first, created_second) == (True, False)
    assert second.id == first.id
    assert Proposal.objects.count() == 1


def test_the_same_request_id_on_another_task_is_another_proposal(agent, refund_policy, requester):
    first, _ = submit_body(agent, body(task_id="task-1", request_id="r-1"))
    second, created = submit_body(agent, body(task_id="task-2", request_id="r-1"))

    assert created
    assert second.id != first.id


def test_the_same_request_id_with_another_action_is_refused(agent, refund_policy, requester):
    submit_body(agent, body(request_id="r-1"))

    error = refusal(agent, body(request_id="r-1", action=factories.refund_action(amount="900.00")))

    assert error.code == "request_id_reused"
    assert error.field == "request.request_id"


def test_a_replay_whose_action_does_not_match_its_digest_is_refused(agent, refund_policy, requester):
    data = body(request_id="r-1")
    submit_body(agent, data)
    data["request"]["action"]["arguments"]["amount"] = "900.00"  # the stated digest is still the old one

    assert refusal(agent, data).code == "digest_mismatch"


def test_a_known_request_replayed_after_its_expiry_returns_the_proposal(agent, refund_policy, requester):
    expires = factories.in_seconds(60)
    data = body(request_id="r-1", expires_at=expires)
    first, _ = submit_body(agent, data)
    expire_due(now=expires + timedelta(seconds=1))

    again, created = submit_body(agent, data)

    assert not created
    assert again.id == first.id


# ---------------------------------------------------------------------------------------------------
# Refusals that leave nothing half-saved


def test_an_oversized_action_is_refused_and_nothing_is_saved(settings, agent, refund_policy, requester):
    settings.PROPOSAL_MAX_BYTES = 2048
    action = factories.refund_action()
    action["arguments"]["note"] = "x" * 4096

    error = refusal(agent, body(action=action))

    assert error.code == "too_large"
    assert "2048" in error.message


def test_an_oversized_consequence_counts_too(settings, agent, refund_policy, requester):
    settings.PROPOSAL_MAX_BYTES = 2048
    data = body()
    data["request"]["consequences"] = {"blast_radius": "y" * 4096}

    assert refusal(agent, data).code == "too_large"


def test_supersedes_naming_an_unknown_request_is_refused_and_nothing_is_saved(
    agent, refund_policy, requester
):
    error = refusal(agent, body(supersedes="never-asked"))

    assert error.code == "unknown_supersedes"
    assert error.field == "request.supersedes"


def test_supersedes_a_request_that_can_no_longer_be_replaced_is_refused(
    agent, refund_policy, requester, reviewer_a
):
    old, _ = submit_body(agent, body(request_id="r-1"))
    cast_vote(
        old.id,
        reviewer_a,
        verdict="approve",
        digest_seen=old.action_digest,
        step_up=step_up_for(reviewer_a, factories.totp_code(reviewer_a)),
    )

    error = refusal(agent, body(request_id="r-2", supersedes="r-1"))

    assert error.code == "cannot_supersede"
    old.refresh_from_db()
    assert old.state == State.APPROVED


def test_supersedes_replaces_a_request_waiting_for_an_answer(agent, refund_policy, requester, reviewer_a):
    old, _ = submit_body(agent, body(request_id="r-1"))
    request_info(
        old.id,
        reviewer_a,
        question="Which card?",
        digest_seen=old.action_digest,
        step_up=fresh_step_up(reviewer_a),
    )

    new, created = submit_body(agent, body(request_id="r-2", supersedes="r-1"))

    assert created
    old.refresh_from_db()
    assert old.state == State.SUPERSEDED
    assert new.supersedes_id == old.id


def test_expires_at_in_the_past_is_refused(agent, refund_policy, requester):
    error = refusal(agent, body(expires_at=factories.in_seconds(-5)))

    assert error.code == "already_expired"
    assert error.field == "request.expires_at"


def test_intake_while_halted_is_refused_and_nothing_is_saved(agent, refund_policy, requester, admin_user):
    halt(scope="agent", actor=admin_user, reason="maintenance", agent=agent)
    before = rows()

    with pytest.raises(HaltedError):
        submit_body(agent, body())

    assert rows() == before


# ---------------------------------------------------------------------------------------------------
# Malformed bodies: the schema refuses them before the service sees them


def errors_of(data: dict) -> list[ErrorDetails]:
    with pytest.raises(ValidationError) as invalid:
        ProposalSubmission.model_validate(data)
    return invalid.value.errors()


def locations(data: dict) -> set[tuple]:
    return {error["loc"] for error in errors_of(data)}


def test_a_missing_task_id_is_named():
    data = body()
    del data["task_id"]

    assert locations(data) == {("task_id",)}


def test_a_malformed_digest_is_named():
    data = body()
    data["request"]["action_digest"] = "md5:abc"

    [error] = errors_of(data)
    assert error["loc"] == ("request", "action_digest")
    assert "sha256" in error["msg"]


def test_an_action_without_a_tool_is_refused_with_a_clear_message():
    data = body()
    del data["request"]["action"]["tool"]

    [error] = errors_of(data)
    assert error["loc"] == ("request", "action")
    assert "action.tool must be a non-empty string" in error["msg"]


def test_arguments_that_are_not_an_object_are_refused():
    data = body()
    data["request"]["action"]["arguments"] = ["1182", "40.00"]

    [error] = errors_of(data)
    assert "action.arguments must be an object" in error["msg"]


def test_unknown_fields_are_refused():
    data = body()
    data["request"]["approved"] = True

    [error] = errors_of(data)
    assert error["loc"] == ("request", "approved")
    assert error["type"] == "extra_forbidden"


def test_a_time_without_zone_is_refused():
    data = body()
    data["request"]["expires_at"] = "2030-01-01T12:00:00"

    [error] = errors_of(data)
    assert error["loc"] == ("request", "expires_at")
    assert "zone offset" in error["msg"]


def test_evidence_links_must_be_web_links():
    data = body()
    data["request"]["evidence"] = [{"title": "x", "url": "javascript:alert(1)"}]

    [error] = errors_of(data)
    assert error["loc"] == ("request", "evidence", 0, "url")


def test_overlong_text_is_refused_by_the_schema():
    data = body(summary="s" * 501)

    assert ("request", "summary") in locations(data)


def test_too_many_evidence_items_are_refused_by_the_schema():
    data = body()
    data["request"]["evidence"] = [{"title": f"item {n}"} for n in range(21)]

    assert ("request", "evidence") in locations(data)
