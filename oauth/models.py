"""The rows of the standard doors: protected resources, their challenges, and CIBA requests.

A protected resource is a registered agent (approvals.Agent, `delivery: pull`, `audience` = the
resource's identifier) with a `ProtectedResource` row beside it: the keys that sign its challenges and
the RAR types it uses, each mapped to the tool name Reviewer's policies see. The proposal itself is an
ordinary approvals.Proposal; these rows only remember which door it came through and for whom."""

import uuid

from django.db import models

from approvals.models import Agent, Proposal


class ProtectedResource(models.Model):
    agent = models.OneToOneField(Agent, on_delete=models.PROTECT, related_name="protected_resource")
    # The public keys that verify the resource's challenges: a JWK Set ({"keys": [...]}), OKP/Ed25519
    # (EdDSA) or EC/P-256 (ES256); never a private member (oauth/keys.py checks).
    jwks = models.JSONField(default=dict)
    jwks_url = models.URLField(blank=True, help_text="where the keys were fetched from, if a URL")
    # {"refund": "payments.refund", ...}: RFC 9396 `type` → the tool policies match.
    types = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.agent.slug


class TransactionAuthorization(models.Model):
    """One accepted transaction authorization challenge: its id is the `transaction_authorization_id`.
    The challenge's `jti` is unique per resource: a challenge is used once (a relay retry by the same
    client with the same challenge finds this row again)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    resource = models.ForeignKey(ProtectedResource, on_delete=models.PROTECT, related_name="+")
    client = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    challenge_jti = models.CharField(max_length=200)
    challenge_digest = models.CharField(max_length=80, help_text="sha256 of the challenge as sent")
    txn = models.CharField(max_length=200)
    # Null only between the jti's reservation and intake's answer (services.accept_challenge).
    proposal = models.OneToOneField(Proposal, null=True, on_delete=models.PROTECT, related_name="+")
    challenge_expires_at = models.DateTimeField()
    interval = models.PositiveSmallIntegerField()
    next_poll_at = models.DateTimeField(null=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["resource", "challenge_jti"], name="oauth_challenge_used_once"),
        ]

    def __str__(self) -> str:
        return f"transaction {self.id} ({self.txn})"


class BackchannelRequest(models.Model):
    """One CIBA authentication request: its id is the `auth_req_id`."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    client = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    proposal = models.OneToOneField(Proposal, on_delete=models.PROTECT, related_name="+")
    login_hint = models.CharField(max_length=200)
    interval = models.PositiveSmallIntegerField()
    next_poll_at = models.DateTimeField(null=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"back-channel request {self.id}"
