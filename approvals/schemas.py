"""Typed shapes of everything that arrives from outside: agent requests, votes over the socket, API bodies.

pydantic validates them (django-ninja uses the same models for the REST API and its OpenAPI document).
Agent-provided text is untrusted: every string and list is capped here, before anything is stored.
"""

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator
from pydantic_core import PydanticCustomError

ShortText = Annotated[str, StringConstraints(max_length=200)]
Text = Annotated[str, StringConstraints(max_length=2000)]
Identifier = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class Principal(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: Identifier
    display: ShortText = ""


class DiffEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    field: ShortText
    before: Text | None = None
    after: Text | None = None


class EvidenceItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: ShortText
    url: Annotated[str, StringConstraints(max_length=1000)] = ""
    excerpt: Text = ""

    @field_validator("url")
    @classmethod
    def only_web_links(cls, url: str) -> str:
        # Shown as a link to reviewers: javascript: or data: URLs would run in Reviewer's origin.
        if url and not url.startswith(("https://", "http://")):
            raise ValueError("evidence url must start with http:// or https://")
        return url


class ApprovalRequest(BaseModel):
    """`metadata[EXTENSION_URI]["request"]` (`reviewer_gate.decision`; DESIGN.md "A2A contract", step 1)."""

    model_config = ConfigDict(extra="forbid")
    request_id: Identifier
    summary: Annotated[str, StringConstraints(min_length=1, max_length=500)]
    action: dict
    action_digest: Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]
    principal: Principal
    # The slug of the agent's own registration in Reviewer. Reviewer adopts a task it finds by listing
    # the agent's tasks only when its request names the registration doing the listing; on every path
    # a request naming another registration is refused (`wrong_agent`).
    agent: Annotated[str, StringConstraints(max_length=50)] = ""
    agent_version: ShortText = ""
    consequences: dict = Field(default_factory=dict)
    diff: Annotated[list[DiffEntry], Field(max_length=50)] = Field(default_factory=list)
    evidence: Annotated[list[EvidenceItem], Field(max_length=20)] = Field(default_factory=list)
    expires_at: datetime | None = None
    supersedes: Identifier | None = None

    @field_validator("action")
    @classmethod
    def action_names_a_tool(cls, action: dict) -> dict:
        tool = action.get("tool")
        if not isinstance(tool, str) or not tool or len(tool) > 200:
            raise ValueError("action.tool must be a non-empty string of at most 200 characters")
        if not isinstance(action.get("arguments", {}), dict):
            raise ValueError("action.arguments must be an object")
        _refuse_numbers(action.get("arguments", {}), ("arguments",))
        return action

    @field_validator("expires_at")
    @classmethod
    def aware_time(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("expires_at must be an RFC 3339 time with a zone offset")
        return value


def first_number(value, path: tuple = ()) -> str | None:
    """The dotted path of the first JSON number (not a boolean) inside `value`, or None."""
    stack = [(value, path)]
    while stack:
        value, path = stack.pop()
        if isinstance(value, int | float) and not isinstance(value, bool):
            return ".".join(str(part) for part in path)
        if isinstance(value, dict):
            stack.extend((item, (*path, key)) for key, item in value.items())
        elif isinstance(value, list):
            stack.extend((item, (*path, index)) for index, item in enumerate(value))
    return None


NUMBERS_ARE_STRINGS = "a JSON number; numbers in action.arguments are sent as strings (DESIGN.md)"


def _refuse_numbers(value, path: tuple) -> None:
    """DESIGN.md "Binding": amounts are strings. A JSON number in the arguments is refused rather than
    canonicalized (40, 40.0 and 4e1 are one number to RFC 8785, and 2**60 is not exact in JSON): the
    same rule on the REST and the push path, and for a reviewer's edit. The error's `path` context
    names the value (see `first_problem`)."""
    where = first_number(value, path)
    if where is not None:
        raise PydanticCustomError("json_number", NUMBERS_ARE_STRINGS, {"path": where})


def first_problem(errors: Sequence[Mapping[str, Any]], skip: int = 0) -> tuple[str | None, str]:
    """(field, message) of pydantic's first error, with the field as a dotted path: the location
    after its first `skip` parts, extended by the `path` context of a nested refusal."""
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    location = [str(part) for part in list(first.get("loc", ()))[skip:]]
    nested = (first.get("ctx") or {}).get("path")
    if nested and location:
        location = location[:-1] + [f"{location[-1]}.{nested}"]
    field = ".".join(location) or None
    message = first.get("msg", "invalid")
    return field, f"{field}: {message}" if field else message


class ProposalSubmission(BaseModel):
    """Body of POST /api/v1/proposals."""

    model_config = ConfigDict(extra="forbid")
    task_id: Identifier
    context_id: ShortText = ""
    request: ApprovalRequest


# Far beyond any policy's max_members (approvals/policy/batching.py MAX_MEMBERS): the schema's own cap.
MAX_MEMBERS_IN_BODY = 500


class BatchSubmission(BaseModel):
    """Body of POST /api/v1/batches, and a batch parked in an A2A task (approvals/a2a/push.py)."""

    model_config = ConfigDict(extra="forbid")
    task_id: Identifier
    context_id: ShortText = ""
    batch_id: Identifier
    summary: ShortText = ""
    manifest_digest: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    members: list[ApprovalRequest] = Field(min_length=1, max_length=MAX_MEMBERS_IN_BODY)


class ConsumeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rev: int


class OutcomeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    status: Literal["succeeded", "failed", "unknown"]
    transaction_id: ShortText | None = None
    detail: Text | None = None


class VoteMessage(BaseModel):
    """A vote over the WebSocket; the same fields as the HTTP form."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["vote"]
    proposal_id: str
    verdict: Literal["approve", "reject"]
    digest: Annotated[str, StringConstraints(max_length=80)]
    reason: Text = ""
    otp_code: Annotated[str, StringConstraints(max_length=20)] = ""
    # The browser's answer to this vote's passkey challenge (POST /proposals/<id>/passkey-challenge),
    # as PublicKeyCredential.toJSON() gives it; checked once, for this proposal and digest.
    passkey: dict | None = None
