"""Whether a reviewer's act (a vote, a question, an edit, break-glass) carries the fresh factor its
proposal's policy asks for: the session's one-time code, a passkey, or a confirmation at the tenant's
identity provider (approvals/policy/step_up.py); a failed one is audited in the act's transaction, and
the approver entry records what held."""

from datetime import UTC, datetime, timedelta

from django.utils import timezone

from accounts import stepup
from accounts.stepup import StepUp
from approvals.models import Proposal
from approvals.policy.step_up import PASSKEY, mode_of, needs_passkey, step_up_window
from approvals.services.common import proposal_subject
from audit.labels import actor_label
from audit.models import Verb
from audit.trail import record
from lib.errors import VoteRefused

STEP_UP_REFUSALS = {"step_up_failed", "step_up_required", "passkey_required", "passkey_cooling_off"}


def _check_step_up(proposal: Proposal, step_up: StepUp | None) -> tuple[str, datetime] | None:
    """Returns (method, time) when the step-up satisfies the proposal's policy, None when it does not:
    per_vote needs a code or passkey checked for this vote; a window also accepts the session's earlier
    step-up; passkey needs a passkey that answered this proposal's and digest's own challenge."""
    mode = mode_of(proposal.requirements)
    if step_up is None or step_up.refused:
        return None
    if step_up.method == stepup.PASSKEY:
        if step_up.bound_to != (str(proposal.id), proposal.action_digest):
            return None
        if mode == PASSKEY and step_up.cool_off_until is not None:
            return None  # a passkey added with a code is no stronger than the code yet
        return step_up.method, timezone.now()
    if mode == PASSKEY:
        return None
    if step_up.method != stepup.SESSION:
        return step_up.method, timezone.now()
    window = step_up_window(mode)
    at = step_up.verified_at  # always set for a session step-up (accounts/stepup.py)
    if window is not None and at is not None and timezone.now() - at <= timedelta(seconds=window):
        return f"session_step_up_{mode}s", timezone.now()
    return None


def check_step_up(
    proposal: Proposal, actor, step_up: StepUp | None, act: str = "vote"
) -> tuple[tuple[str, datetime] | None, VoteRefused | None]:
    """(method, time) when the step-up satisfies the proposal's policy, else a refusal whose audit event
    is already recorded. Approve, reject, ask and edit all change what the agent receives, so all four
    need it. The caller lets the transaction commit (the refusal is evidence) and raises afterwards."""
    if step_up is not None and step_up.method == stepup.IDP:
        step, refusal = _provider_step(proposal, step_up), _provider_refusal(act)
    else:
        step, refusal = _check_step_up(proposal, step_up), None
    if step is not None:
        return step, None
    refusal = refusal or _step_up_refusal(proposal, step_up, act)
    record(
        proposal.tenant_id,
        actor=actor_label(actor),
        verb=Verb.STEP_UP_FAILED,
        subject=proposal_subject(proposal),
        data={"code": refusal.code},
    )
    return None, refusal


def _provider_step(proposal: Proposal, step_up: StepUp) -> tuple[str, datetime] | None:
    """A fresh sign-in at the tenant's provider (approvals/stepup.py took it from the session only where
    the tenant confirms votes there) counts for the proposal and digest it was made for, and for no
    policy that asks for a passkey."""
    if needs_passkey(proposal.requirements) or step_up.bound_to != (str(proposal.id), proposal.action_digest):
        return None
    return step_up.method, timezone.now()


def _provider_refusal(act: str) -> VoteRefused:
    return VoteRefused(
        "step_up_failed",
        f"that confirmation at your identity provider does not count for this {act} (another proposal "
        "or version, or a policy that needs a passkey); confirm again",
    )


def auth_detail(step_up: StepUp | None) -> dict:
    """What the factor attested besides its method (a provider's acr and amr), for approvers[].auth."""
    detail = getattr(step_up, "detail", None)
    return detail() if callable(detail) else {}


def _step_up_refusal(proposal: Proposal, step_up: StepUp | None, act: str) -> VoteRefused:
    passkey_asked = needs_passkey(proposal.requirements)
    if step_up is not None and step_up.refused:
        return VoteRefused(
            "step_up_failed",
            "that passkey confirmation was not accepted; try again"
            if passkey_asked
            else "that code is not valid (or was already used); try the current code",
            "otp_code",
        )
    if step_up is not None and step_up.method == stepup.PASSKEY and step_up.cool_off_until is not None:
        if step_up.bound_to == (str(proposal.id), proposal.action_digest):
            ends = step_up.cool_off_until.astimezone(UTC)
            return VoteRefused(
                "passkey_cooling_off",
                f"this {act} needs a passkey you have had longer: the one you used is new, and its "
                f"policy accepts it from {ends:%Y-%m-%d %H:%M} UTC on (a new passkey waits a while, so one "
                "added with a stolen code cannot release anything at once). Use "
                "another of your passkeys, or ask a tenant admin to vouch for this one",
                "otp_code",
            )
    if step_up is not None and step_up.method == stepup.PASSKEY:
        return VoteRefused(
            "step_up_failed", "that passkey confirmation was for another proposal or version; try again"
        )
    if passkey_asked:
        return VoteRefused(
            "passkey_required",
            f"this {act} needs your passkey: its policy accepts no one-time code and no earlier "
            "step-up. Confirm with your passkey when the browser asks (register one under Your devices)",
            "otp_code",
        )
    return VoteRefused("step_up_required", f"this {act} needs a fresh one-time code", "otp_code")
