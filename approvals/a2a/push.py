"""Reading what agents push (DESIGN.md "A2A contract" step 2): `parse_push()` turns a push body into a
`PushEvent` (an approval request, or a task state that settles a proposal); `submit()` takes a request
in."""

from dataclasses import dataclass

import pydantic
from a2a.types import (
    StreamResponse,
    TaskState,
)
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError

from approvals.a2a.rust_approval import RustRequestError, rust_request
from approvals.models import Agent, Proposal
from approvals.schemas import ProposalSubmission, first_problem
from approvals.services.intake import record_intake_refusal, submit_proposal
from approvals.services.reconcile import TERMINAL_TASK_STATES
from lib.errors import HaltedError, IntakeError
from reviewer_gate.decision import EXTENSION_URI

AUTH_REQUIRED = TaskState.Name(TaskState.TASK_STATE_AUTH_REQUIRED)
INPUT_REQUIRED = TaskState.Name(TaskState.TASK_STATE_INPUT_REQUIRED)
# Where each approval extension parks a task that asks (a2a-rust's request_approval: input-required).
PARKED_STATES: dict[str, tuple[str, ...]] = {
    Agent.ApprovalExtension.REVIEWER: (AUTH_REQUIRED,),
    Agent.ApprovalExtension.A2A_RUST: (INPUT_REQUIRED, AUTH_REQUIRED),
}

# ---------------------------------------------------------------------------------------------------
# Intake: push bodies


class PushError(IntakeError):
    """A push body that is not a valid A2A StreamResponse, or whose approval request is malformed."""


@dataclass(frozen=True)
class PushEvent:
    task_id: str
    context_id: str
    state: str  # a TaskState name, "" for events that carry none (artifact updates, messages)
    detail: str = ""  # the status message's text, for the outcome record
    submission: ProposalSubmission | None = None

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_TASK_STATES


def parse_push(body, extension: str = Agent.ApprovalExtension.REVIEWER) -> PushEvent | None:
    """Read one push body from an agent that speaks `extension`. Returns None for events that carry no
    task state (artifacts, messages); raises PushError for anything malformed."""
    if not isinstance(body, dict) or not all(isinstance(value, dict) for value in body.values()):
        raise PushError("invalid_shape", "a push body is a JSON object (an A2A StreamResponse)")
    try:
        # Lenient about fields a newer SDK may add; the ids and the state are checked below.
        event = ParseDict(body, StreamResponse(), ignore_unknown_fields=True)
    except ParseError as error:
        raise PushError("invalid_shape", f"not an A2A StreamResponse: {error}") from error
    payload = event.WhichOneof("payload")
    if payload == "task":
        task_id, context_id, status = event.task.id, event.task.context_id, event.task.status
    elif payload == "status_update":
        task_id, context_id, status = (
            event.status_update.task_id,
            event.status_update.context_id,
            event.status_update.status,
        )
    else:
        return None
    if not task_id or status.state == TaskState.TASK_STATE_UNSPECIFIED:
        raise PushError("invalid_shape", "a task event names its task and a known task state")
    state = TaskState.Name(status.state)
    detail = " ".join(part.text for part in status.message.parts if part.text)[:1000]
    submission = None
    if state in PARKED_STATES[extension]:
        submission = parked_request(extension, task_id, context_id, MessageToDict(status.message.metadata))
    return PushEvent(
        task_id=task_id, context_id=context_id, state=state, detail=detail, submission=submission
    )


def approval_request(task_id: str, context_id: str, metadata: dict) -> ProposalSubmission | None:
    """The approval request parked in this status, or None when the task waits for something else."""
    ours = metadata.get(EXTENSION_URI)
    if not isinstance(ours, dict) or "request" not in ours:
        return None
    try:
        return ProposalSubmission.model_validate(
            {"task_id": task_id, "context_id": context_id, "request": ours["request"]}
        )
    except pydantic.ValidationError as error:
        field, message = first_problem(error.errors())
        raise PushError("invalid", message, field) from error


def parked_request(
    extension: str, task_id: str, context_id: str, metadata: dict
) -> ProposalSubmission | None:
    """The approval request a parked task's status message carries, in the agent's extension."""
    if extension != Agent.ApprovalExtension.A2A_RUST:
        return approval_request(task_id, context_id, metadata)
    try:
        return rust_request(task_id, context_id, metadata)
    except RustRequestError as error:
        raise PushError(error.code, error.message, error.field) from error


def submit(
    agent: Agent, submission: ProposalSubmission, *, via: str, decision_in_answer: bool = False
) -> tuple[Proposal, bool]:
    """Intake through either channel (push or REST); a refusal is recorded in the audit trail."""
    try:
        return submit_proposal(agent, submission, via=via, decision_in_answer=decision_in_answer)
    except (IntakeError, HaltedError) as error:
        record_intake_refusal(
            agent, error, via=via, task_id=submission.task_id, request_id=submission.request.request_id
        )
        raise
