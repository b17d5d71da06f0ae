"""The rows behind reminders, escalation, reachability, delegation and Slack. Written only by the services
(approvals/services/follow_ups.py, delegations.py, slack_links.py) and the worker's Slack step
(approvals/notify/slack_sync.py, which records what it posted). They belong to the approvals app
(approvals/models/__init__.py imports this module), so their tables are `approvals_*`.

Proposal ── FollowUp (one per waiting proposal: reminders sent, escalation, reachability)
         ├─ StandIn (a person added to its eligible set by the escalation step)
         └─ SlackPost (one message per channel, updated in place)
Tenant ── Delegation (out of office: a person's eligibility lent to a delegate for a period)
       ├─ SlackWorkspace ─┬─ SlackIdentity (a Slack user linked to a Reviewer person)
       │                  └─ SlackLinkRequest (the one-time link the person confirms in Reviewer)
       └─ TeamsBot ─┬─ TeamsIdentity, TeamsLinkRequest (as for Slack)
                    └─ TeamsChannel (or a channel without a bot: its incoming webhook)
"""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from tenants.models import Tenant


class FollowUp(models.Model):
    """What the worker did to chase one proposal that waits for people. Intake writes it (one INSERT);
    the worker checks reachability on its first look and records each reminder (percent of the TTL) and
    the escalation.

    The worker reads only what is due: `due_at` is its next look (the first right after intake, then
    the next reminder, the escalation step or the expiry), and a follow-up with no `announced_at` is a
    new proposal still to be posted to chat and pushed to phones. A tick costs what is due, never what
    merely waits: a million waiting proposals are not read every two seconds."""

    proposal = models.OneToOneField("approvals.Proposal", on_delete=models.CASCADE, related_name="follow_up")
    due_at = models.DateTimeField(default=timezone.now)
    announced_at = models.DateTimeField(null=True, blank=True)
    reminders_sent = models.JSONField(default=list, blank=True)  # [50, 80]: the percents already sent
    escalated_at = models.DateTimeField(null=True, blank=True)
    # When the worker checked whether the quorum is reachable (its first look, right after intake), and
    # what it found: {} reachable, else {"missing": [{"group", "count", "reachable"}]}.
    reach_checked_at = models.DateTimeField(null=True, blank=True)
    unreachable = models.JSONField(default=dict, blank=True)
    admins_told_at = models.DateTimeField(null=True, blank=True)  # the unreachable quorum was reported
    expiry_told_at = models.DateTimeField(null=True, blank=True)  # at_expiry "expire_closed_tell_admins"
    done = models.BooleanField(default=False)  # it stopped waiting: nothing more to chase

    class Meta:
        indexes = [
            models.Index(fields=["due_at"], condition=Q(done=False), name="follow_ups_due"),
            models.Index(
                fields=["id"], condition=Q(done=False, announced_at=None), name="follow_ups_unannounced"
            ),
        ]

    def __str__(self):
        return f"follow-up of {self.proposal_id}"


class StandIn(models.Model):
    """A person the escalation step added to a proposal's eligible set: they may fill any of its
    threshold slots (one slot per person, as every voter), from `added_at` on."""

    proposal = models.ForeignKey("approvals.Proposal", on_delete=models.CASCADE, related_name="stand_ins")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    added_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["proposal", "user"], name="one_stand_in_per_person")]

    def __str__(self):
        return f"{self.user_id} stands in on {self.proposal_id}"


class Delegation(models.Model):
    """Out of office: from `starts_at` until `ends_at` (or `ended_at`, if ended early) the delegate may
    decide what the delegator may decide, in the delegator's groups, on the delegator's behalf."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    delegator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    delegate = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)  # ended early by the person or an admin
    end_recorded = models.BooleanField(default=False)  # the audit trail has its end (early or on time)
    note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["tenant", "delegate", "starts_at", "ends_at"], name="delegations_by_delegate"
            )
        ]

    def __str__(self):
        return f"{self.delegator_id} -> {self.delegate_id}"

    def active_at(self, moment) -> bool:
        end = min(self.ends_at, self.ended_at) if self.ended_at else self.ends_at
        return self.starts_at <= moment < end


class SlackWorkspace(models.Model):
    """A tenant's Slack installation. The bot token and signing secret are never stored here: each is a
    reference, "env:NAME" or "file:/path" (approvals/notify/secrets.py)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    team_id = models.CharField(max_length=40, unique=True)
    bot_token_ref = models.CharField(max_length=300)
    signing_secret_ref = models.CharField(max_length=300)
    # {"<group slug>": "<channel id>" | "dm"}: where a proposal needing that group is posted.
    channels = models.JSONField(default=dict)
    enabled = models.BooleanField(default=True)

    def __str__(self):
        return f"slack {self.team_id}"


class SlackIdentity(models.Model):
    """A Slack user linked to a Reviewer person (after the person confirmed the link in Reviewer)."""

    workspace = models.ForeignKey(SlackWorkspace, on_delete=models.CASCADE, related_name="identities")
    slack_user_id = models.CharField(max_length=40)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    linked_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "slack_user_id"], name="one_person_per_slack_user"),
            models.UniqueConstraint(fields=["workspace", "user"], name="one_slack_user_per_person"),
        ]

    def __str__(self):
        return f"{self.slack_user_id} is {self.user_id}"


class SlackLinkRequest(models.Model):
    """A one-time link offered to an unlinked Slack user; the token is stored hashed."""

    workspace = models.ForeignKey(SlackWorkspace, on_delete=models.CASCADE, related_name="+")
    slack_user_id = models.CharField(max_length=40)
    token_hash = models.CharField(max_length=64, unique=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"link offer to {self.slack_user_id}"


class SlackPost(models.Model):
    """One Slack message about a proposal; the worker updates it in place when what it shows changed."""

    proposal = models.ForeignKey("approvals.Proposal", on_delete=models.CASCADE, related_name="slack_posts")
    workspace = models.ForeignKey(SlackWorkspace, on_delete=models.CASCADE, related_name="+")
    channel = models.CharField(max_length=40)  # as asked: a channel id, or a Slack user id for a DM
    posted_channel = models.CharField(max_length=40, blank=True)  # as Slack answered (a DM's D… id)
    ts = models.CharField(max_length=40, blank=True)  # empty until posted
    shown = models.CharField(max_length=64, blank=True)  # a hash of what the message shows now
    final = models.BooleanField(default=False)  # it shows a closed proposal: no more updates
    attempts = models.PositiveIntegerField(default=0)
    # When the worker looks at it next (approvals/notify/slack_sync.py): at once when planned, when its
    # proposal changes, after a backoff when a call failed, else a slow safety-net sweep.
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_error = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["proposal", "workspace", "channel"], name="one_slack_post_per_channel"
            )
        ]
        indexes = [models.Index(fields=["next_attempt_at"], condition=Q(final=False), name="slack_posts_due")]

    def __str__(self):
        return f"slack post of {self.proposal_id} in {self.channel}"


class SlackRequestSeen(models.Model):
    """The signature of every Slack request accepted in the last minutes: a replay inside Slack's
    five-minute window is refused because its signature is already here (older ones fail the timestamp
    check). The worker deletes rows older than the window."""

    signature = models.CharField(max_length=100, unique=True)
    at = models.DateTimeField(db_index=True)

    def __str__(self):
        return self.signature


class WebhookEndpoint(models.Model):
    """A tenant admin's HTTPS endpoint for decision and lifecycle events, signed per Standard Webhooks
    with `secret` ("whsec_" + base64, made by Reviewer and shown to the admin once). Deliveries are
    outbox rows (kind "webhook"), so they get the outbox's retries, backoff and dead letters."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    url = models.URLField(max_length=500)
    secret = models.CharField(max_length=100)
    # The event types sent ("proposal.approved", ...); empty: all of them.
    events = models.JSONField(default=list, blank=True)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return self.url


class TeamsBot(models.Model):
    """A tenant's Teams bot: an Azure Bot (an Entra app registration) whose messaging endpoint is
    Reviewer's /teams/messages. Teams signs each activity it sends with a token for `app_id`; Reviewer
    posts and updates cards through `service_url` with a token it gets for `app_id` and the app's
    password, a secret reference ("env:NAME" or "file:/path"), never stored here."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    app_id = models.CharField(max_length=64, unique=True)  # the `aud` of the tokens Teams signs
    app_password_ref = models.CharField(max_length=300)
    # The Bot Connector of the tenant's region (an activity's serviceUrl, e.g. https://smba.trafficmanager.net/emea/).
    service_url = models.URLField(max_length=300)
    enabled = models.BooleanField(default=True)

    def __str__(self):
        return f"teams bot {self.app_id}"


class TeamsIdentity(models.Model):
    """A Teams user (their Entra object id) linked to a Reviewer person, after the person confirmed it."""

    bot = models.ForeignKey(TeamsBot, on_delete=models.CASCADE, related_name="identities")
    aad_object_id = models.CharField(max_length=64)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    linked_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["bot", "aad_object_id"], name="one_person_per_teams_user"),
            models.UniqueConstraint(fields=["bot", "user"], name="one_teams_user_per_person"),
        ]

    def __str__(self):
        return f"{self.aad_object_id} is {self.user_id}"


class TeamsLinkRequest(models.Model):
    """A one-time link offered to an unlinked Teams user; the token is stored hashed."""

    bot = models.ForeignKey(TeamsBot, on_delete=models.CASCADE, related_name="+")
    aad_object_id = models.CharField(max_length=64)
    token_hash = models.CharField(max_length=64, unique=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"link offer to {self.aad_object_id}"


class TeamsChannel(models.Model):
    """A Microsoft Teams channel: reached through its Workflows incoming webhook (a card with a link), or,
    when `bot` is set, through the tenant's bot (a card with Approve and Reject, updated in place). The
    webhook URL carries its own signature, so it is a secret reference ("env:NAME" or "file:/path")."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=100)
    webhook_url_ref = models.CharField(max_length=300, blank=True)
    bot = models.ForeignKey(
        TeamsBot, on_delete=models.CASCADE, null=True, blank=True, related_name="channels"
    )
    conversation_id = models.CharField(max_length=200, blank=True)  # the channel's "19:…@thread.tacv2"
    groups = models.JSONField(default=list)  # the approver group slugs whose proposals go here
    enabled = models.BooleanField(default=True)

    def __str__(self):
        return f"teams {self.name}"


class TeamsPost(models.Model):
    """A proposal's card in one Teams channel. Through a bot, one card updated in place (`activity_id`)
    until the proposal closes; through an incoming webhook, the request and then its outcome as a second
    card (a webhook cannot edit a card it posted)."""

    proposal = models.ForeignKey("approvals.Proposal", on_delete=models.CASCADE, related_name="+")
    channel = models.ForeignKey(TeamsChannel, on_delete=models.CASCADE, related_name="+")
    requested_at = models.DateTimeField(null=True, blank=True)
    activity_id = models.CharField(max_length=100, blank=True)  # the bot's card, as the connector named it
    shown = models.CharField(max_length=64, blank=True)  # a hash of what the bot's card shows now
    outcome_state = models.CharField(max_length=20, blank=True)  # the closed state its outcome card showed
    attempts = models.PositiveIntegerField(default=0)
    # When the worker looks at it next (approvals/notify/teams.py), as SlackPost.next_attempt_at.
    next_attempt_at = models.DateTimeField(default=timezone.now)
    final = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["proposal", "channel"], name="one_teams_post_per_channel")
        ]
        indexes = [models.Index(fields=["next_attempt_at"], condition=Q(final=False), name="teams_posts_due")]

    def __str__(self):
        return f"teams post of {self.proposal_id}"


class PushSubscription(models.Model):
    """A device of a person that receives Web Push notifications ("Your devices"). The endpoint is the
    browser vendor's push service URL; p256dh and auth are the keys the payload is encrypted to."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=100)
    endpoint = models.URLField(max_length=1000, unique=True)
    p256dh = models.CharField(max_length=200)
    auth = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)
    last_error = models.CharField(max_length=200, blank=True)

    def __str__(self):
        return f"push device {self.name} of {self.user_id}"


class PushSent(models.Model):
    """One push about one proposal to one person, for one reason: sent once (the worker's record)."""

    proposal = models.ForeignKey("approvals.Proposal", on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    reason = models.CharField(max_length=30)  # "new", "reminder-50", "escalation"
    at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["proposal", "user", "reason"], name="one_push_per_reason")
        ]

    def __str__(self):
        return f"push {self.reason} of {self.proposal_id} to {self.user_id}"
