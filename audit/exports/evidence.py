"""The evidence packet of one proposal: everything a compliance reviewer needs to answer "who let this
happen, on what information, and what happened then", with the checks that tie it to the audit chain.

Sections: the envelope the agent sent; what reviewers were shown (digest and page hashes); the policy
evaluation; each vote with reviewer, group, time and authentication; the signed decision token's
SHA-256, header and claims (never the token itself), and whether its signature and claims match the
audit log; delivery attempts; consumption; the outcome; revocation; every state change; and the raw
audit events with their hashes and the checkpoint that covers them (checkable against a verifiable
bundle of the same period).
"""

import hashlib
import json

import jwt
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone

from audit.chain.checkpoints import verification_jwks
from audit.chain.records import checkpoint_dict, event_dict
from audit.chain.sequencer import make_seals_durable, sequence_chain
from audit.labels import tenant_chain
from audit.models import AuditEvent, Checkpoint, Verb
from audit.people import display_names
from audit.shapes import format_time
from audit.verify.chains import event_hash
from audit.verify.hashing import canonical_digest
from lib import agent_text
from reviewer_gate.decision import ALGORITHMS

PACKET_FORMAT = "reviewer-evidence/1"
CHECK_LABELS = {
    "envelope_digest_matches": "The stored action hashes to its digest",
    "submitted_digest_matches": "The digest recorded at intake is the same",
    "votes_saw_this_digest": "Every vote was cast on this digest",
    "event_hashes_recompute": "Every audit event of this proposal hashes to its recorded hash",
    "token_signature_valid": "The decision token's signature verifies",
    "token_matches_audit": "The token's jti, digest and decision match the audit log",
    "signed_by_checkpoint": "A signed checkpoint covers these events",
}


def _display_names(actors: set[str]) -> dict[str, str]:
    return display_names(actors)


def _names_of_erased_people_withheld(claims: dict) -> dict:
    """The token's claims as the packet shows them: an approver (or the person a delegate voted for) whom
    erase_person removed from the directory appears by pseudonym only. The token itself still names them
    (it is signed as issued; the packet carries its hash, never the token), and its signature is checked
    on the token as issued."""
    approvers = [entry for entry in claims.get("approvers") or [] if isinstance(entry, dict)]
    people = [entry for entry in approvers] + [
        entry["on_behalf_of"] for entry in approvers if isinstance(entry.get("on_behalf_of"), dict)
    ]
    known = _display_names({person.get("sub") for person in people})
    for person in people:
        sub = person.get("sub")
        if isinstance(sub, str) and sub.startswith("person:") and sub not in known and "name" in person:
            person["name"] = sub  # erased: the pseudonym, as the trail shows them
    return claims


def _token_checks(decision: dict | None, signed_event: dict | None) -> dict:
    if not decision or not decision.get("token"):
        return {"present": False}
    token = decision["token"]
    header = jwt.get_unverified_header(token)
    claims = jwt.decode(token, options={"verify_signature": False})
    jwk = next((k for k in verification_jwks()["keys"] if k["kid"] == header.get("kid")), None)
    signature_valid = None
    if jwk is not None:
        try:
            jwt.decode(
                token,
                jwt.PyJWK(jwk).key,
                algorithms=ALGORITHMS,
                options={"verify_aud": False, "verify_exp": False, "verify_nbf": False, "verify_iat": False},
            )
            signature_valid = True
        except jwt.InvalidTokenError:
            signature_valid = False
    audited = (signed_event or {}).get("data", {})
    return {
        "present": True,
        "header": header,
        "claims": _names_of_erased_people_withheld(claims),
        "signature_valid": signature_valid,
        "signature_note": None if jwk else f"public key {header.get('kid')} is no longer known",
        "matches_audit": bool(audited)
        and claims.get("jti") == audited.get("jti")
        and claims.get("action_digest") == audited.get("action_digest")
        and claims.get("decision") == audited.get("decision"),
    }


# audit/ never imports approvals/ (the import-linter contracts in pyproject.toml), so the domain's half of
# the packet comes from a function approvals registers when it starts (approvals/apps.py ready()).
_proposal_records = None


def provide_proposal_records(reader) -> None:
    """Register `reader(tenant_id, proposal_id) -> dict | None` (approvals/evidence.py proposal_record)."""
    global _proposal_records
    _proposal_records = reader


def build_packet(tenant, proposal_id) -> dict | None:
    """The packet as a JSON-ready dict, or None when the proposal is not this tenant's (or, failing
    closed, when no domain registered its records)."""
    if _proposal_records is None:
        return None
    record = _proposal_records(tenant.id, proposal_id)
    if record is None:
        return None
    subject = f"proposal:{record['id']}"
    sequence_chain(tenant_chain(tenant.id))  # the packet shows committed events with their place in the chain
    events = [
        event_dict(e)
        for e in AuditEvent.objects.chained(tenant_chain(tenant.id)).filter(subject=subject).order_by("seq")
    ]
    make_seals_durable(tenant_chain(tenant.id))  # the packet's places in the chain are on disk
    names = _display_names({e["actor"] for e in events})

    def of(*verbs):
        return [e for e in events if e["verb"] in verbs]

    signed = next(iter(of(Verb.DECISION_SIGNED)), None)
    slots = {a.get("sub"): a.get("group") for a in (signed or {}).get("data", {}).get("approvers", [])}
    votes = [
        {
            "reviewer": e["actor"],
            "name": names.get(e["actor"], e["actor"]),
            "verdict": e["data"].get("verdict"),
            "at": e["at"],
            "groups": e["data"].get("groups", []),
            "counted_in_group": slots.get(e["actor"]),
            "authentication": e["data"].get("auth"),
            "digest_seen": e["data"].get("digest_seen"),
            "page_hash": e["data"].get("page_hash"),
            "reason": e["data"].get("reason", ""),
            "seq": e["seq"],
        }
        for e in of(Verb.VOTE_CAST)
    ]
    envelope = record["envelope"]
    last_seq = events[-1]["seq"] if events else 0
    covering = (
        Checkpoint.objects.filter(chain=tenant_chain(tenant.id), seq__gte=last_seq).order_by("seq").first()
        if events
        else None
    )
    decision = record["decision"]
    token = _token_checks(decision, signed)
    if decision and decision.get("token"):
        # A packet travels (auditors, tickets, e-mail); the token is a bearer credential until it expires
        # or is consumed. Its hash and its checked header and claims (token_check) are the evidence.
        decision = {key: value for key, value in decision.items() if key != "token"}
        decision["token_sha256"] = hashlib.sha256(record["decision"]["token"].encode()).hexdigest()
    return {
        "format": PACKET_FORMAT,
        "generated_at": format_time(timezone.now()),
        "issuer": settings.REVIEWER_ISSUER,
        "tenant": {"slug": tenant.slug, "name": tenant.name},
        "proposal": {
            "id": record["id"],
            "state": record["state"],
            "agent": record["agent"],
            "audience": record["agent_audience"],
            "envelope": envelope,
            # Hidden and text-direction characters, mixed-script words: by path, in words (agent_text.py).
            "agent_text_warnings": agent_text.warnings_in(envelope),
            "requirements": record["requirements"],
            "headline": record.get("headline"),
        },
        "shown": {
            "action_digest": envelope["action_digest"],
            "digests_seen_by_voters": sorted({v["digest_seen"] for v in votes if v["digest_seen"]}),
            "page_hashes": [{"reviewer": v["reviewer"], "page_hash": v["page_hash"]} for v in votes],
        },
        "policy": [e["data"] for e in of(Verb.POLICY_EVALUATED)],
        "votes": votes,
        "refusals": [
            {"actor": e["actor"], "verb": e["verb"], "at": e["at"], "code": e["data"].get("code")}
            for e in of(Verb.VOTE_REFUSED, Verb.STEP_UP_FAILED)
        ],
        "decision": {**(decision or {}), "audit": signed["data"] if signed else None, "token_check": token},
        "deliveries": {
            "outbox": record["deliveries"],
            "events": [
                {"verb": e["verb"], "at": e["at"], "data": e["data"]}
                for e in events
                if e["verb"].startswith("outbox.")
            ],
        },
        "consumption": [
            {"verb": e["verb"], "actor": e["actor"], "at": e["at"], "data": e["data"]}
            for e in of(Verb.DECISION_CONSUMED, Verb.DECISION_CONSUME_REFUSED)
        ],
        "outcome": {
            "transaction_id": record["transaction_id"],
            "detail": record["outcome_detail"],
            "compensation_note": record["compensation_note"],
            "reports": [
                {"actor": e["actor"], "at": e["at"], "data": e["data"]}
                for e in of(Verb.OUTCOME_RECORDED, Verb.COMPENSATION_NOTED)
            ],
        },
        "revocation": [
            {"actor": e["actor"], "at": e["at"], "data": e["data"]} for e in of(Verb.DECISION_REVOKED)
        ],
        "transitions": [
            {
                "at": e["at"],
                "actor": e["actor"],
                "from": e["data"].get("from"),
                "to": e["data"].get("to"),
                "reason": e["data"].get("reason", ""),
            }
            for e in of(Verb.PROPOSAL_TRANSITIONED)
        ],
        "events": events,
        "covering_checkpoint": checkpoint_dict(covering) if covering else None,
        "checks": {
            "envelope_digest_matches": canonical_digest(envelope["action"]) == envelope["action_digest"],
            "submitted_digest_matches": all(
                e["data"].get("action_digest") == envelope["action_digest"]
                for e in of(Verb.PROPOSAL_SUBMITTED)
            ),
            "votes_saw_this_digest": all(v["digest_seen"] == envelope["action_digest"] for v in votes),
            "event_hashes_recompute": all(event_hash(e) == e["hash"] for e in events),
            "token_signature_valid": token.get("signature_valid"),
            "token_matches_audit": token.get("matches_audit"),
            "signed_by_checkpoint": covering is not None,
        },
    }


def packet_json(packet: dict) -> bytes:
    # Hidden characters an agent sent stay in the values but travel as escapes (lib/agent_text.py).
    return agent_text.json_escaped(
        json.dumps(packet, cls=DjangoJSONEncoder, indent=2, ensure_ascii=False)
    ).encode()
