"""Append-only, hash-chained audit events: one chain per tenant (`tenant:<id>`) and one `system` chain.

Each event's hash covers its predecessor's hash, so changing, removing or reordering any event breaks
every hash after it; signed checkpoints of the chain head make truncation of the tail visible too.
An event is accepted with one insert (the event and its pending row) and chained once, right after its
transaction commits, by the sequencer (audit/chain.py), which inserts its seal (seq, prev_hash, hash):
each row is written once. The models and their querysets refuse update and delete; on PostgreSQL
triggers (migrations 0002, 0004, 0006) refuse UPDATE, DELETE and TRUNCATE on events, seals, checkpoints
and archived public keys, a seal that does not continue its chain, and any chain head that does not name
the hash sealed at its seq.
"""

import uuid
from typing import ClassVar

from django.conf import settings
from django.db import models
from django.db.models import F


class AppendOnlyError(Exception):
    pass


class AppendOnlyQuerySet(models.QuerySet):
    """`.filter(...).update()` and `.delete()` skip Model.save/delete: refuse them here as well."""

    def update(self, **kwargs):
        raise AppendOnlyError(f"{self.model.__name__} rows are append-only")

    def delete(self):
        raise AppendOnlyError(f"{self.model.__name__} rows are append-only")

    def bulk_update(self, objs, fields, batch_size=None):
        raise AppendOnlyError(f"{self.model.__name__} rows are append-only")

    def bulk_create(self, objs, *args, **kwargs):
        created = super().bulk_create(objs, *args, **kwargs)
        for obj in created:
            obj.stored = True
        return created


class AppendOnlyModel(models.Model):
    """A row is written once: save() stores an instance that is not in the database yet and refuses one
    that is (read from it, saved or bulk-created already, or built by `from_db` after a raw insert)."""

    objects = AppendOnlyQuerySet.as_manager()

    stored = False

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if self.stored:
            raise AppendOnlyError(f"{type(self).__name__} rows are append-only")
        super().save(*args, **kwargs)
        self.stored = True

    def delete(self, *args, **kwargs):
        raise AppendOnlyError(f"{type(self).__name__} rows are append-only")

    @classmethod
    def from_db(cls, db, field_names, values):
        instance = super().from_db(db, field_names, values)
        instance.stored = True
        return instance


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
    DEVICE_CHANGE_REFUSED = "device.change_refused"
    PASSKEY_VOUCHED = "passkey.vouched"
    SIGN_IN_CODE_REFUSED = "sign_in.code_refused"
    SIGN_IN_THROTTLED = "sign_in.throttled"
    SIGN_IN_UNLOCKED = "sign_in.unlocked"
    PERSON_CHANGED = "person.changed"
    INTAKE_REFUSED = "intake.refused"
    INTAKE_THROTTLED = "intake.throttled"
    QUOTA_CHANGED = "quota.changed"
    SIGNING_KEY_ROTATED = "signing_key.rotated"
    EXPORT_CREATED = "export.created"
    TENANT_CREATED = "tenant.created"
    TENANT_CHANGED = "tenant.changed"
    GROUP_CREATED = "group.created"
    POLICY_CREATED = "policy.created"
    AGENT_CHANGED = "agent.changed"
    AGENT_TOKENS_ROTATED = "agent.tokens_rotated"
    BREAK_GLASS_RELEASED = "break_glass.released"
    BREAK_GLASS_REFUSED = "break_glass.refused"
    POST_HOC_REVIEW_ASSIGNED = "post_hoc_review.assigned"
    POST_HOC_REVIEW_DONE = "post_hoc_review.done"
    POST_HOC_REVIEW_OVERDUE = "post_hoc_review.overdue"
    SSO_SIGNED_IN = "sso.signed_in"
    SSO_REFUSED = "sso.refused"
    PERSON_PROVISIONED = "person.provisioned"
    PERSON_DEPROVISIONED = "person.deprovisioned"
    IDENTITY_PROVIDER_CHANGED = "identity_provider.changed"
    SCIM_GROUP_CHANGED = "scim.group_changed"
    PROPOSAL_UNREACHABLE = "proposal.unreachable"
    PROPOSAL_REMINDED = "proposal.reminded"
    PROPOSAL_ESCALATED = "proposal.escalated"
    DELEGATION_CREATED = "delegation.created"
    DELEGATION_USED = "delegation.used"
    DELEGATION_ENDED = "delegation.ended"
    SLACK_LINKED = "slack.linked"
    SLACK_REQUEST_REFUSED = "slack.request_refused"
    TEAMS_LINKED = "teams.linked"
    TEAMS_REQUEST_REFUSED = "teams.request_refused"
    WEBHOOK_REGISTERED = "webhook.registered"
    PUSH_DEVICE_ADDED = "push_device.added"
    PUSH_DEVICE_REMOVED = "push_device.removed"
    PERSON_ERASED = "person.erased"
    BATCH_SUBMITTED = "batch.submitted"
    BATCH_CHANGED = "batch.changed"
    BATCH_VOTED = "batch.voted"
    BATCH_REVOKED = "batch.revoked"
    GRANT_REQUESTED = "grant.requested"
    GRANT_ACTIVATED = "grant.activated"
    GRANT_DECLINED = "grant.declined"
    GRANT_USED = "grant.used"
    GRANT_REVOKED = "grant.revoked"
    GRANT_RENEWAL_ASKED = "grant.renewal_asked"
    GRANT_LAPSED = "grant.lapsed"
    RESOURCE_REGISTERED = "resource.registered"
    TXN_CHALLENGE_ACCEPTED = "txn_challenge.accepted"
    BACKCHANNEL_REQUESTED = "backchannel.requested"


class AuditEventQuerySet(AppendOnlyQuerySet):
    def chained(self, chain: str):
        """The chain's sealed events, filtered on the seal's own chain column (its (chain, seq) index
        serves every seq range and order)."""
        return self.filter(seal__chain=chain)


_AuditEventManagerBase = models.Manager.from_queryset(AuditEventQuerySet)


class AuditEventManager(_AuditEventManagerBase):
    """Every queryset carries the event's place in its chain from its seal (NULL until sealed), under
    the names the events had as columns before the seal table: `seq`, `prev_hash`, `hash`. So
    `.filter(seq__lte=...)`, `.order_by("seq")` and `.values("seq", "hash")` read as they always did."""

    def get_queryset(self):
        return (
            super()
            .get_queryset()
            .annotate(seq=F("seal__seq"), prev_hash=F("seal__prev_hash"), hash=F("seal__hash"))
        )


class AuditEvent(AppendOnlyModel):
    """One event: what happened, written once by the change's transaction and never changed. Its place
    in the chain (seq, prev_hash, hash) is its AuditSeal, written once by the sequencer shortly after that
    transaction commits; querysets carry it as `seq`, `prev_hash` and `hash` (None until sealed)."""

    chain = models.CharField(max_length=50)
    at = models.DateTimeField(db_index=True)
    actor = models.CharField(
        max_length=200, help_text="person:<pseudonym> | agent:<slug> | policy:<id>@<v> | system"
    )
    verb = models.CharField(max_length=50, help_text="one of Verb; checked by audit.chain.append_many")
    subject = models.CharField(max_length=200, help_text="e.g. proposal:<uuid>")
    data = models.JSONField(default=dict)

    objects: ClassVar[AuditEventManager] = AuditEventManager()

    # Until sealed (and on an instance read without the manager's annotations).
    seq: int | None = None
    prev_hash: str | None = None
    hash: str | None = None

    class Meta:
        # Chain order; events not sealed yet last, in the order the sequencer will take them.
        ordering = ["chain", F("seal__seq").asc(nulls_last=True), "id"]
        indexes = [models.Index(fields=["subject"], name="audit_by_subject")]

    def __str__(self):
        return f"{self.chain}#{self.seq} {self.verb} {self.subject}"

    def hashed_fields(self) -> dict:
        from audit.shapes import event_body

        return event_body(
            self.chain, self.seq, self.at, self.actor, self.verb, self.subject, self.data, self.prev_hash
        )


class AuditSeal(AppendOnlyModel):
    """An event's place in its chain: seq, prev_hash and hash, inserted once by the sequencer (never
    updated: the event row itself is written once too). On PostgreSQL a trigger refuses a seal that
    does not continue its chain (seq n+1 naming the hash sealed at n) or names an event of another chain;
    UPDATE, DELETE and TRUNCATE are refused."""

    event = models.OneToOneField(
        AuditEvent, primary_key=True, on_delete=models.PROTECT, related_name="seal", db_column="event_id"
    )
    chain = models.CharField(max_length=50)
    seq = models.PositiveBigIntegerField()
    prev_hash = models.CharField(max_length=71)
    hash = models.CharField(max_length=71)

    class Meta:
        ordering = ["chain", "seq"]
        constraints = [models.UniqueConstraint(fields=["chain", "seq"], name="one_seal_per_chain_seq")]

    def __str__(self):
        return f"{self.chain}#{self.seq}"


class AuditPending(models.Model):
    """The sequencer's queue: one row per accepted event not sealed yet, inserted with the event (same
    statement on PostgreSQL), deleted when it is sealed. A small table, so finding what to chain never
    scans the trail. Deleting a row here hides nothing: `audit_verify` reports an event that has neither
    a seal nor a pending row.

    On PostgreSQL the table is UNLOGGED (migration 0003): its rows are hints the trail itself implies
    (an event without a seal is pending), so they stay out of the WAL that every append's commit waits
    for. Crash recovery and a promoted standby empty it, and `AuditPendingMark` with it; the sequencer
    then finds the mark missing and restores the rows from the events (audit/lost_pending.py).
    """

    event = models.OneToOneField(
        AuditEvent, primary_key=True, on_delete=models.PROTECT, related_name="+", db_column="event_id"
    )
    chain = models.CharField(max_length=50)

    class Meta:
        indexes = [models.Index(fields=["chain", "event"], name="audit_pending_by_chain")]

    def __str__(self):
        return f"{self.chain} event {self.event_id} pending"


class AuditPendingMark(models.Model):
    """One row while `AuditPending` holds a row for every unsealed event. UNLOGGED like it on PostgreSQL,
    so whatever empties the pending table (crash recovery, a base backup restored, a standby promoted)
    empties this too: a missing mark is what tells the sequencer to restore the pending rows. Only the
    sequencer writes it; the application role may not delete it (no full scan on demand)."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)

    def __str__(self):
        return "pending rows complete"


class ChainHead(models.Model):
    """The last seq and hash of one chain; the sequencer locks it (SELECT ... FOR UPDATE) while chaining."""

    chain = models.CharField(max_length=50, primary_key=True)
    seq = models.PositiveBigIntegerField(default=0)
    hash = models.CharField(max_length=71)

    def __str__(self):
        return f"{self.chain} at {self.seq}"


class Checkpoint(AppendOnlyModel):
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

    def __str__(self):
        return f"checkpoint of {self.chain} at {self.seq}"


class PublicKey(AppendOnlyModel):
    """The public half of every key that signed a checkpoint. Retired private keys are deleted from disk
    (signing_keys prune_expired), but checkpoints must stay verifiable for years."""

    kid = models.CharField(max_length=100, primary_key=True)
    jwk = models.JSONField()
    first_used_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return self.kid


class ExportJob(models.Model):
    """A background export. The job runner (audit/jobs.py) updates `done` as it goes; the page polls it."""

    class Kind(models.TextChoices):
        CSV = "csv", "CSV"
        JSONL = "jsonl", "JSON Lines"
        PDF = "pdf", "PDF report"
        BUNDLE = "bundle", "Verifiable bundle (zip)"

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # The tenant by id, like the chain name: audit/ keeps no foreign key into the approval domain.
    tenant_id = models.PositiveBigIntegerField()
    chain = models.CharField(max_length=50)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    kind = models.CharField(max_length=10, choices=Kind.choices)
    # {"since", "until", "policy", "agent", "reviewer", "outcome"}: what the export selects.
    filters = models.JSONField(default=dict, blank=True)
    # The chain head when the export was requested: the export is a snapshot up to this seq.
    up_to_seq = models.PositiveBigIntegerField(default=0)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    total = models.PositiveBigIntegerField(default=0)
    done = models.PositiveBigIntegerField(default=0)
    file_name = models.CharField(max_length=200, blank=True, help_text="relative to AUDIT_EXPORT_DIR")
    sha256 = models.CharField(max_length=64, blank=True)
    size = models.PositiveBigIntegerField(default=0)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(
        null=True, blank=True, help_text="last progress; a stale running job is retried"
    )
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status", "created_at"], name="export_jobs_due"),
            models.Index(fields=["tenant_id", "created_at"], name="export_jobs_by_tenant"),
        ]

    def __str__(self):
        return f"{self.get_kind_display()} export of {self.chain} ({self.status})"

    @property
    def percent(self) -> int:
        if self.status == self.Status.DONE:
            return 100
        if not self.total:
            return 0
        return min(99, int(self.done * 100 / self.total))

    @property
    def finished(self) -> bool:
        return self.status in {self.Status.DONE, self.Status.FAILED}


class SiemCursor(models.Model):
    """How far one consumer of a chain has read it: a SIEM sink (audit/siem.py), or the tenant webhook
    feed (approvals/services/webhooks.py). `seq` is the last event it took."""

    sink = models.CharField(max_length=20)
    chain = models.CharField(max_length=50)
    seq = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["sink", "chain"], name="one_siem_cursor_per_chain")]

    def __str__(self):
        return f"{self.sink} at {self.chain}:{self.seq}"


class PersonDirectoryEntry(models.Model):
    """Who a pseudonym in the trail is. The trail names people only as `person:<random id>`
    (audit.labels.user_label); this row is the one link from that id to a person, whose name and e-mail
    are read through it. Not append-only: `manage.py erase_person` deletes it, and the trail, whose
    hashes never covered a name, then names nobody."""

    pseudonym = models.CharField(max_length=60, unique=True)
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="audit_directory_entry"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return self.pseudonym
