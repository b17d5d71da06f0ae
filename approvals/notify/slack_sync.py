"""The worker's Slack step: post each new proposal that waits for review to the channels of its approver
groups (or to the linked reviewers' direct messages), then keep every message in step with the proposal
(votes, decision, expiry, withdrawal) by updating it in place, so a channel never shows a stale
"waiting". It compares what the message shows with what it would show now (a hash of the blocks), so a
missed event costs nothing: the next tick repairs it. Calls go out with no transaction open.

The Web API is slack_sdk's WebClient, at settings.SLACK_API_BASE_URL (Slack's own by default; tests
point it at a local stand-in that implements the same methods).
"""

import logging
from datetime import datetime

from django.conf import settings
from django.utils import timezone
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

from approvals.models.notifications import SlackIdentity, SlackPost, SlackWorkspace
from approvals.notify import slack_messages
from approvals.notify.audience import waiting_reviewers
from approvals.notify.lanes import Lane
from approvals.notify.secrets import SecretMissing, read_secret
from approvals.services import slack_links
from approvals.services.chat_posts import next_look
from approvals.states import TERMINAL

log = logging.getLogger(__name__)

BATCH = 50
DM = "dm"


def client(workspace: SlackWorkspace) -> WebClient:
    return WebClient(
        token=read_secret(workspace.bot_token_ref),
        base_url=settings.SLACK_API_BASE_URL,
        # slack_sdk's one timeout (urllib's) bounds the connect and each read alike.
        timeout=settings.NOTIFY_READ_TIMEOUT_SECONDS,
    )


def channels_for(proposal, workspace: SlackWorkspace) -> list[str]:
    """Where this proposal is posted: the channel of each threshold group the workspace maps, and for a
    group mapped to "dm", the linked Slack users of the people who could decide it."""
    slugs = [t["group"] for t in proposal.requirements.get("thresholds", [])]
    targets = [workspace.channels[s] for s in slugs if s in workspace.channels]
    channels = [t for t in targets if t != DM]
    if DM in targets:
        people = [p.pk for p in waiting_reviewers(proposal)]
        channels += list(
            SlackIdentity.objects.filter(workspace=workspace, user_id__in=people)
            .order_by("slack_user_id")
            .values_list("slack_user_id", flat=True)
        )
    return list(dict.fromkeys(channels))


def enabled_workspaces(tenant_ids) -> list[SlackWorkspace]:
    """The enabled workspaces of these tenants, read once per announcing step for all it announces."""
    return list(SlackWorkspace.objects.filter(tenant_id__in=tenant_ids, enabled=True))


def announce(proposal, workspaces: list[SlackWorkspace]) -> None:
    """Plan a new proposal's messages in `workspaces`, the enabled Slack workspaces of its tenant (the
    worker's announcing step, approvals/notify/announce.py); `run` posts them in the same tick."""
    for workspace in workspaces:
        slack_links.plan_posts(proposal, workspace, channels_for(proposal, workspace))


def run(now: datetime | None = None, lane: Lane | None = None) -> int:
    """Post or update the messages that are due (services.chat_posts: planned, changed, retried, or
    the safety net's turn), most overdue first, the workspaces side by side in `lane` (one at a time
    without one). A workspace that cannot be reached is in the lane's back-off: its posts stay due and
    are left out until it ended. Returns how many calls succeeded."""
    now = now or timezone.now()
    lane = lane or Lane("slack", threads=0)
    slack_links.forget_old_signatures(now)
    due = (
        SlackPost.objects.filter(final=False, workspace__enabled=True, next_attempt_at__lte=now)
        .exclude(workspace_id__in=lane.backoff.skipped())
        .select_related("proposal__agent", "workspace")
        .order_by("next_attempt_at", "id")[:BATCH]
    )
    by_workspace: dict[int, list[SlackPost]] = {}
    for post in due:
        by_workspace.setdefault(post.workspace_id, []).append(post)
    done = []  # (list.append is atomic: the lane's threads count here side by side)
    clients: dict[int, WebClient] = {}

    def send(post: SlackPost) -> bool:
        try:
            if post.workspace_id not in clients:
                clients[post.workspace_id] = client(post.workspace)
            done.append(sync_post(clients[post.workspace_id], post, now))
        except SlackApiError as error:  # Slack answered: this post's problem, not the workspace's
            log.warning("slack post %s failed: %s", post.pk, error)
            slack_links.record_post_failure(post, type(error).__name__, now)
        except (SlackClientError, SecretMissing, OSError) as error:  # no answer, or no token
            log.warning("slack post %s failed: %s", post.pk, error)
            slack_links.record_post_failure(post, type(error).__name__, now)
            return False
        return True

    lane.run(by_workspace, send)  # what a failing workspace left is still due: nothing to hand back
    return sum(done)


def sync_post(web: WebClient, post: SlackPost, now: datetime) -> int:
    proposal = post.proposal
    blocks = slack_messages.proposal_blocks(proposal)
    shown = slack_messages.shown_hash(blocks)
    final = proposal.state in TERMINAL
    if post.ts and shown == post.shown:
        slack_links.record_checked(post, final=final, next_look=next_look(now))
        return 0
    text = slack_messages.fallback_text(proposal)
    if post.ts:
        answer = web.chat_update(channel=post.posted_channel, ts=post.ts, blocks=blocks, text=text)
    else:
        answer = web.chat_postMessage(
            channel=post.channel, blocks=blocks, text=text, unfurl_links=False, unfurl_media=False
        )
    slack_links.record_posted(
        post, channel=answer["channel"], ts=answer["ts"], shown=shown, final=final, next_look=next_look(now)
    )
    return 1


def thread_note(proposal, text: str) -> None:
    """A reply in each of the proposal's Slack threads (a reminder, an escalation): Reviewer's words only."""
    for post in SlackPost.objects.filter(proposal=proposal).exclude(ts="").select_related("workspace"):
        try:
            client(post.workspace).chat_postMessage(
                channel=post.posted_channel,
                thread_ts=post.ts,
                text=slack_messages.escape(text),
                unfurl_links=False,
                unfurl_media=False,
            )
        except (SlackApiError, SlackClientError, SecretMissing, OSError) as error:
            log.warning("slack thread note on %s failed: %s", post.pk, error)
