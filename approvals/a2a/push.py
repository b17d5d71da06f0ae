"""Reading what agents push (DESIGN.md "A2A contract" step 2): `parse_push()` turns a push body into a
`PushEvent` (an approval request or a batch of them, or a task state that settles a proposal);
`submit()` takes a request in (a batch: approvals/services/batches.py `submit_batch`)."""

from dataclasses import dataclass

import pydantic
from a2a.types import (
    StreamResponse,
    TaskState,
)
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError

from approvals.a2a.rust_approval import RustRequestError, rust_request
from approvals.models import Agent, Proposal
from approvals.schemas import BatchSubmission, ProposalSubmission, first_problem
from approvals.services.intake import record_intake_refusal, submit_proposal
from approvals.services.reconcile import TERMINAL_TASK_STATES
from lib import tracing
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
    # A batch parked instead of one request (docs/agents/batches.md#over-a2a), or None.
    batch: BatchSubmission | None = None
    # The agent's span that parked the request (W3C traceparent in the status message's metadata), "" if
    # none or malformed: intake's span continues it (lib/tracing.py).
    traceparent: str = ""

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
    submission = batch = None
    traceparent = ""
    if state in PARKED_STATES[extension]:
        metadata = MessageToDict(status.message.metadata)
        submission = parked_request(extension, task_id, context_id, metadata)
        if submission is None and extension == Agent.ApprovalExtension.REVIEWER:
            batch = parked_batch(task_id, context_id, metadata)
        traceparent = tracing.valid_traceparent(metadata.get("traceparent"))
    return PushEvent(
        task_id=task_id,
        context_id=context_id,
        state=state,
        detail=detail,
        submission=submission,
        batch=batch,
        traceparent=traceparent,
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


def parked_batch(task_id: str, context_id: str, metadata: dict) -> BatchSubmission | None:
    """The batch parked in this status (`{"batch": {batch_id, summary, manifest_digest, members}}`
    under the extension's URI), or None; read from a push and from the tasks the worker lists
    (approvals/a2a/parked_tasks.py)."""
    ours = metadata.get(EXTENSION_URI)
    if not isinstance(ours, dict) or "batch" not in ours:
        return None
    parked = ours["batch"]
    if not isinstance(parked, dict) or "task_id" in parked or "context_id" in parked:
        raise PushError("invalid", "a parked batch is an object; its task is the parked task", "batch")
    try:
        return BatchSubmission.model_validate({**parked, "task_id": task_id, "context_id": context_id})
    except pydantic.ValidationError as error:
        field, message = first_problem(error.errors())
        raise PushError("invalid", message, f"batch.{field}" if field else "batch") from error


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
    agent: Agent,
    submission: ProposalSubmission,
    *,
    via: str,
    decision_in_answer: bool = False,
    consume: bool = False,
    traceparent: str = "",
) -> tuple[Proposal, bool]:
    """Intake through either channel (push or REST); a refusal is recorded in the audit trail.
    `traceparent`: the agent's span this intake continues (lib/tracing.py), "" for a trace of its own."""
    attributes = {"reviewer.agent": agent.slug, "reviewer.intake.via": via}
    with tracing.span(
        "reviewer.intake", parent=traceparent, kind=tracing.SERVER, attributes=attributes
    ) as span:
        try:
            proposal, created = submit_proposal(
                agent, submission, via=via, decision_in_answer=decision_in_answer, consume=consume
            )
        except (IntakeError, HaltedError) as error:
            span.set_attribute("reviewer.refusal", error.code)
            record_intake_refusal(
                agent, error, via=via, task_id=submission.task_id, request_id=submission.request.request_id
            )
            raise
        span.set_attributes(
            {
                "reviewer.proposal.id": str(proposal.id),
                "reviewer.proposal.state": proposal.state,
                "reviewer.proposal.created": created,
                "reviewer.tenant.id": proposal.tenant_id,
            }
        )
        return proposal, created
