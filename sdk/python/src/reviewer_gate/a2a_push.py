"""An a2a-sdk agent's push notifications to Reviewer (extra `a2a`).

a2a-sdk POSTs every event of a task to each push config the task has, and awaits each POST in the
task's event consumer before the next event is handled: a task's events wait for the webhooks' answers.
Reviewer's webhook (`/a2a/push/<slug>/`) reads only two kinds of them (docs/agents/a2a-extension.md,
"Push notifications"): a task parked in TASK_STATE_AUTH_REQUIRED (the approval request) and a final
state. `ReviewerPushSender` sends Reviewer only those and everything to any other webhook:

    push_http = httpx.AsyncClient(timeout=15, transport=RetryOverloaded())
    push_sender = ReviewerPushSender(push_http, push_store, reviewer_urls=["https://reviewer.example.com"])

(`reviewer_urls`: Reviewer's base URLs as push configs name them, its public `iss` and any other.)

`RetryOverloaded` is the transport for those POSTs: it waits out Reviewer's overload answers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable

import httpx
from a2a.server.tasks import BasePushNotificationSender, PushNotificationConfigStore
from a2a.server.tasks.push_notification_sender import PushNotificationEvent
from a2a.types import Task, TaskPushNotificationConfig, TaskState, TaskStatusUpdateEvent

logger = logging.getLogger(__name__)

# The states of the events Reviewer's webhook reads: a parked request, and the final states that
# settle an execution. It answers any other event 200 `ignored`.
READ_STATES = frozenset(
    {
        TaskState.TASK_STATE_AUTH_REQUIRED,
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)


def reviewer_reads(event: PushNotificationEvent) -> bool:
    """Whether Reviewer's webhook does anything with `event` (artifacts and working states it ignores)."""
    if isinstance(event, Task | TaskStatusUpdateEvent):
        return event.status.state in READ_STATES
    return False


class ReviewerPushSender(BasePushNotificationSender):
    """a2a-sdk's push sender, except that a push config whose URL is Reviewer's webhook (`<one of
    reviewer_urls>/a2a/push/...`) gets only the events Reviewer reads. Each event it would ignore
    costs Reviewer a request and holds the task's next events until it is answered."""

    def __init__(
        self,
        httpx_client: httpx.AsyncClient,
        config_store: PushNotificationConfigStore,
        *,
        reviewer_urls: Iterable[str],
        push_url_validator: Callable[[str], Awaitable[bool]] | None = None,
    ):
        super().__init__(httpx_client, config_store, push_url_validator=push_url_validator)
        self.reviewer_webhooks = tuple(url.rstrip("/") + "/a2a/push/" for url in reviewer_urls)
        if not self.reviewer_webhooks:
            raise ValueError("reviewer_urls names no URL")

    async def _dispatch_notification(
        self, event: PushNotificationEvent, push_info: TaskPushNotificationConfig, task_id: str
    ) -> bool:
        # a2a-sdk 1.3's per-config send (the package pins a2a-sdk below 1.4; tests/test_a2a_push.py
        # runs this through send_notification, so a renamed hook fails there, not silently).
        if push_info.url.startswith(self.reviewer_webhooks) and not reviewer_reads(event):
            return True  # nothing to tell Reviewer: the event counts as delivered
        return await super()._dispatch_notification(event, push_info, task_id)


class RetryOverloaded(httpx.AsyncBaseTransport):
    """An httpx async transport for the agent's pushes to Reviewer: a `503 overloaded` (Reviewer's
    concurrency limit refused the request before it ran) is sent again after Retry-After, for at most
    `budget_seconds`. a2a-sdk's push sender does not retry, and a task's final state that never reaches
    Reviewer leaves its proposal open until it expires.

        httpx.AsyncClient(timeout=15, transport=RetryOverloaded())
    """

    def __init__(self, inner: httpx.AsyncBaseTransport | None = None, *, budget_seconds: float = 30):
        self.inner = inner or httpx.AsyncHTTPTransport()
        self.budget_seconds = budget_seconds

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        deadline = time.monotonic() + self.budget_seconds
        while True:
            response = await self.inner.handle_async_request(request)
            if response.status_code != 503:
                return response
            await response.aread()
            try:
                overloaded = json.loads(response.content)["error"]["code"] == "overloaded"
                pause = min(max(float(response.headers.get("Retry-After", "1")), 0.1), 10.0)
            except (ValueError, KeyError, TypeError):
                return response
            if not overloaded or time.monotonic() + pause > deadline:
                return response
            logger.info("%s %s: Reviewer is overloaded; again in %.1fs", request.method, request.url, pause)
            await asyncio.sleep(pause)  # the backoff Reviewer asked for

    async def aclose(self) -> None:
        await self.inner.aclose()
