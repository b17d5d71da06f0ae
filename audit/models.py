"""Append-only, hash-chained audit events: one chain per tenant (`tenant:<id>`) and one `system` chain.

Each event's hash covers its predecessor's hash, so changing, removing or reordering any event breaks
every hash after it; signed checkpoints of the chain head make truncation of the tail visible too.
The model refuses update and delete; on PostgreSQL a trigger refuses UPDATE, DELETE and TRUNCATE.
"""

from django.db import models


class AppendOnlyError(Exception):
    pass


class Verb(models.TextChoices):
    PROPOSAL_SUBMITTED = "proposal.submitted"
    PROPOSAL_TRANSITIONED = "proposal.transitioned"
    POLICY_EVALUATED = "policy.evaluated"
    VOTE_CAST = "vote.cast"
    VOTE_REFUSED = "vote.refused"
    STEP_UP_FAILED = "step_up.failed"
    DECISION_SIGNED = "decision.signed"
    DECISION_CONSUMED = "decision.consumed"
    DECISION_CONSUME_REFUSED = "decision.consume_refused"
    DECISION_REVOKED = "decision.revoked"
    OUTBOX_DELIVERED = "outbox.delivered"
    OUTBOX_FAILED = "outbox.failed"
    OUTBOX_DEAD = "outbox.dead"
    OUTCOME_RECORDED = "outcome.recorded"
    COMPENSATION_NOTED = "compensation.noted"
    HALT_STARTED = "halt.started"
    HALT_LIFTED = "halt.lifted"
    AGENT_REGISTERED = "agent.registered"
    POLICY_VERSION_CREATED = "policy.version_created"
    POLICY_VERSION_ACTIVATED = "policy.version_activated"
    GROUP_MEMBER_ADDED = "group.member_added"
    GROUP_MEMBER_REMOVED = "group.member_removed"
    MEMBERSHIP_CHANGED = "membership.changed"
    DEVICE_ENROLLED = "device.enrolled"
    DEVICE_RESET = "device.reset"
    INTAKE_REFUSED = "intake.refused"
    SIGNING_KEY_ROTATED = "signing_key.rotated"
    EXPORT_CREATED = "export.created"


class AuditEvent(models.Model):
    chain = models.CharField(max_length=50)
    seq = models.PositiveBigIntegerField()
    at = models.DateTimeField(db_index=True)
    actor = models.CharField(max_length=200, help_text="user:<username> | agent:<slug> | policy:<id>@<v> | system")
    verb = models.CharField(max_length=50, choices=Verb.choices)
    subject = models.CharField(max_length=200, help_text="e.g. proposal:<uuid>")
    data = models.JSONField(default=dict)
    prev_hash = models.CharField(max_length=71)
    hash = models.CharField(max_length=71)

    class Meta:
        ordering = ["chain", "seq"]
        constraints = [models.UniqueConstraint(fields=["chain", "seq"], name="one_event_per_chain_seq")]
        indexes = [models.Index(fields=["subject"], name="audit_by_subject")]

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise AppendOnlyError("audit events are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError("audit events are append-only")

    def hashed_fields(self) -> dict:
        from audit.chain import event_body

        return event_body(self.chain, self.seq, self.at, self.actor, self.verb, self.subject, self.data, self.prev_hash)


class ChainHead(models.Model):
    """The last seq and hash of one chain; locked with SELECT ... FOR UPDATE while appending."""

    chain = models.CharField(max_length=50, primary_key=True)
    seq = models.PositiveBigIntegerField(default=0)
    hash = models.CharField(max_length=71)


class Checkpoint(models.Model):
    """A signed statement of a chain head: truncating or rolling back the chain contradicts it."""

    chain = models.CharField(max_length=50)
    seq = models.PositiveBigIntegerField()
    hash = models.CharField(max_length=71)
    at = models.DateTimeField()
    kid = models.CharField(max_length=100)
    signature = models.CharField(max_length=200)

    class Meta:
        ordering = ["chain", "seq"]
        constraints = [models.UniqueConstraint(fields=["chain", "seq"], name="one_checkpoint_per_chain_seq")]
