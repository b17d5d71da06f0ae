"""a2a-rust's approval extension on the wire, copied from a2a-rust's own tests and book
(github.com/tomtom215/a2a-rust), so Reviewer is tested against the shapes that project produces.

- crates/a2a-protocol-types/src/approval/tests.rs (commit f824b035bb196f482b8da2700439601e36522a9b):
  `the_wire_shape_is_camel_case_under_one_key` (the request and decision objects under one key) and
  `the_action_digest_is_sha256_over_canonical_json` (an action and its digest);
- crates/a2a-protocol-types/src/approval.rs and crates/a2a-protocol-server/src/approval.rs (commit
  1acb212b768592468802fa3a085dd9b90a8954e6): the URI, the metadata key, the members, and the gate's rules;
- book/src/deployment/oversight.md ("Asking before acting"): the refund executor's action, summary and
  question.
"""

import uuid

from approvals.canonical import action_digest

EXTENSION_URI = "https://a2a-rust.com/extensions/approval/v1"
METADATA_KEY = "a2a-rust.com/approval"

# types/src/approval/tests.rs, the_wire_shape_is_camel_case_under_one_key: the request (requestedBy
# set) and a denial with a comment, exactly as serialized there.
WIRE_REQUEST = {
    "requestId": "req-1",
    "summary": "Refund EUR 40",
    "digest": "sha256:00ff",
    "requestedBy": "alice",
}
WIRE_DENIAL = {"requestId": "req-1", "decision": "deny", "digest": "sha256:00ff", "comment": "wrong order"}

# types/src/approval/tests.rs, the_action_digest_is_sha256_over_canonical_json (also the action of the
# book's refund executor).
REFUND_ACTION = {"tool": "refund", "order": 1182, "amount": "40.00"}
REFUND_DIGEST = "sha256:9dfdaf0fdc48912f539a8dcef195052a1959f82f4880c2ec3d0730fa96ad538c"
# book/src/deployment/oversight.md: ApprovalRequest::new(uuid, "Refund EUR 40.00 to order 1182", digest)
# and emit.request_approval(request, "May I issue this refund?").
REFUND_SUMMARY = "Refund EUR 40.00 to order 1182"
REFUND_QUESTION = "May I issue this refund?"


def refund_request(
    *, requested_by: str | None = "bearer:alice", with_action: bool = False, agent: str = ""
) -> dict:
    """The request the book's executor parks, with the server's `requestedBy`; `with_action` adds the
    action beside the extension's members (a2a-rust's reader ignores members it does not know), and
    `agent` the registration's slug, which Reviewer needs to adopt a task it lists."""
    request: dict[str, object] = {
        "requestId": str(uuid.uuid4()),
        "summary": REFUND_SUMMARY,
        "digest": action_digest(REFUND_ACTION),
    }
    if requested_by is not None:
        request["requestedBy"] = requested_by
    if with_action:
        request["action"] = REFUND_ACTION
    if agent:
        request["agent"] = agent
    return request


def parked_status_update(task_id: str, context_id: str, request: dict) -> dict:
    """A push of the task's input-required status whose agent message carries the request and declares
    the extension (ApprovalRequest::attach), as A2A 1.0 JSON (a StreamResponse)."""
    return {
        "statusUpdate": {
            "taskId": task_id,
            "contextId": context_id,
            "status": {
                "state": "TASK_STATE_INPUT_REQUIRED",
                "message": {
                    "messageId": str(uuid.uuid4()),
                    "role": "ROLE_AGENT",
                    "taskId": task_id,
                    "contextId": context_id,
                    "parts": [{"text": REFUND_QUESTION}],
                    "metadata": {METADATA_KEY: request},
                    "extensions": [EXTENSION_URI],
                },
            },
        }
    }
