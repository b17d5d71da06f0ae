"""Tell Reviewer about a parked task directly: `POST /api/v1/proposals` (DESIGN.md "A2A contract" 2).

Best effort on purpose: the task's AUTH_REQUIRED status (pushed, or found by Reviewer's
reconciliation loop) is the source of truth, so a failed POST is logged and the agent carries on.
It runs in the background so the executor never waits on Reviewer.
"""

import asyncio
import logging

import httpx

logger = logging.getLogger(__name__)


class ProposalPublisher:
    def __init__(self, reviewer_url: str, api_token: str | None, *, enabled: bool = True, timeout: float = 5):
        self.enabled = enabled
        self.url = f"{reviewer_url.rstrip('/')}/api/v1/proposals"
        headers = {"Authorization": f"Bearer {api_token}"} if api_token else {}
        self.http = httpx.AsyncClient(timeout=timeout, headers=headers)
        self._pending: set[asyncio.Task] = set()

    def publish(self, task_id: str, context_id: str, request: dict) -> None:
        """Start the POST in the background and return at once (nothing when REST intake is off)."""
        if not self.enabled:
            return
        body = {"task_id": task_id, "context_id": context_id, "request": request}
        background = asyncio.create_task(self._post(body), name=f"proposal:{request['request_id']}")
        self._pending.add(background)  # keep a reference, or the task may be garbage-collected mid-flight
        background.add_done_callback(self._pending.discard)

    async def _post(self, body: dict) -> None:
        try:
            response = await self.http.post(self.url, json=body)
        except httpx.HTTPError as error:
            logger.warning("Reviewer not told about request %s: %r", body["request"]["request_id"], error)
            return
        if response.status_code in (200, 201):
            logger.info("Reviewer knows request %s: %s", body["request"]["request_id"], response.text[:200])
        else:
            logger.warning(
                "Reviewer refused request %s: HTTP %s %s",
                body["request"]["request_id"],
                response.status_code,
                response.text[:300],
            )

    async def aclose(self) -> None:
        if self._pending:
            await asyncio.wait(self._pending, timeout=5)
        await self.http.aclose()
