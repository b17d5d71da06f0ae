"""The signed decision: a compact JWS (EdDSA, typ approval-decision+jwt) with DESIGN.md's claims."""

from datetime import datetime

import jwt
from django.conf import settings

import signing_keys as keys

# The token's typ and algorithm are the gate's (reviewer_gate.decision): what Reviewer signs is what the
# agent's gate accepts, by construction.
from reviewer_gate.decision import ALGORITHMS, TOKEN_TYPE

# The claims a standard door may add to a decision token (Proposal.token_claims; docs/agents/
# decision-token.md, "The TAC and CIBA profile"). Only these: a door never changes a core claim.
PROFILE_CLAIMS = frozenset({"txn", "authorization_details"})


def profile_claims(token_claims: dict) -> dict:
    """The door's claims for the token, refusing any name outside PROFILE_CLAIMS (a programming error:
    the doors write only these)."""
    unknown = set(token_claims) - PROFILE_CLAIMS
    if unknown:
        raise ValueError(f"a door may not set the decision claims {sorted(unknown)}")
    return dict(token_claims)


def sign_decision(claims: dict) -> tuple[str, str]:
    """Sign claims with the active key. Returns (token, kid)."""
    key = keys.active_key()
    token = jwt.encode(
        claims, key.signer(), algorithm=ALGORITHMS[0], headers={"kid": key.kid, "typ": TOKEN_TYPE}
    )
    return token, key.kid


def decision_claims(
    *,
    proposal,
    decision,
    issued_at: datetime,
    expires_at: datetime,
    approvers: list[dict],
    quorum: dict,
    policy: dict | None,
) -> dict:
    """The claims of DESIGN.md "A2A contract"; times are integer seconds (JWT NumericDate)."""
    return {
        "iss": settings.REVIEWER_ISSUER,
        "aud": proposal.agent.audience,
        "sub": proposal.task_id,
        "jti": str(decision.jti),
        "iat": int(issued_at.timestamp()),
        "nbf": int(issued_at.timestamp()),
        "exp": int(expires_at.timestamp()),
        "context_id": proposal.context_id,
        "request_id": proposal.request_id,
        "proposal_id": str(proposal.id),
        "action_digest": proposal.action_digest,
        "decision": decision.kind,
        "reason": decision.reason,
        "approvers": approvers,
        "quorum": quorum,
        "policy": policy,
        "tenant": proposal.tenant.slug,
        "rev": decision.rev,
        "consume": decision.consume_required,
    }
