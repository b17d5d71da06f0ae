"""Tell Reviewer about a parked task directly: `POST /api/v1/proposals` (DESIGN.md "A2A contract" 2).

Best effort on purpose: the task's AUTH_REQUIRED status (pushed, or found by Reviewer's
reconciliation loop) is the source of truth, so a failed POST is logged and the agent carries on.
It runs in the background so the executor never waits on Reviewer.

An overloaded Reviewer answers 503 with Retry-After (or the connection fails): the POST is sent again
after that pause, or a capped exponential backoff with jitter, up to ATTEMPTS times. Sending it again is
safe: Reviewer's intake is idempotent on the request id.
"""

import asyncio
import logging
import random

import httpx

logger = logging.getLogger(__name__)

ATTEMPTS = 6
BACKOFF_SECONDS = 0.5  # the first pause; doubles per attempt, at most BACKOFF_CAP_SECONDS
BACKOFF_CAP_SECONDS = 8.0
RETRY_STATUSES = {429, 502, 503, 504}


def retry_pause(attempt: int, response: httpx.Response | None) -> float:
    """Seconds before attempt `attempt + 1`: the server's Retry-After if it named one, else backoff."""
    retry_after = response.headers.get("Retry-After", "") if response is not None else ""
    if retry_after.isdigit():
        return min(float(retry_after), BACKOFF_CAP_SECONDS) + random.uniform(0, BACKOFF_SECONDS)  # noqa: S311
    return random.uniform(0, min(BACKOFF_CAP_SECONDS, BACKOFF_SECONDS * 2**attempt))  # noqa: S311 (jitter)


class ProposalPublisher:
    def __init__(self, reviewer_url: str, api_token: str | None, *, timeout: float = 5):
        self.url = f"{reviewer_url.rstrip('/')}/api/v1/proposals"
        headers = {"Authorization": f"Bearer {api_token}"} if api_token else {}
        self.http = httpx.AsyncClient(timeout=timeout, headers=headers)
        self._pending: set[asyncio.Task] = set()

    def publish(self, task_id: str, context_id: str, request: dict) -> None:
        """Start the POST in the background and return at once."""
        body = {"task_id": task_id, "context_id": context_id, "request": request}
        background = asyncio.create_task(self._post(body), name=f"proposal:{request['request_id']}")
        self._pending.add(background)  # keep a reference, or the task may be garbage-collected mid-flight
        background.add_done_callback(self._pending.discard)

    async def _post(self, body: dict) -> None:
        request_id = body["request"]["request_id"]
        for attempt in range(ATTEMPTS):
            response = None
            try:
                response = await self.http.post(self.url, json=body)
            except httpx.HTTPError as error:
                failure = repr(error)
            else:
                if response.status_code in (200, 201):
                    logger.info("Reviewer knows request %s: %s", request_id, response.text[:200])
                    return
                failure = f"HTTP {response.status_code} {response.text[:300]}"
                if response.status_code not in RETRY_STATUSES:
                    logger.warning("Reviewer refused request %s: %s", request_id, failure)
                    return
            if attempt + 1 < ATTEMPTS:
                pause = retry_pause(attempt, response)
                logger.info("Reviewer busy for request %s (%s): again in %.1f s", request_id, failure, pause)
                await asyncio.sleep(pause)
        logger.warning(
            "Reviewer not told about request %s after %d attempts: %s", request_id, ATTEMPTS, failure
        )

    async def aclose(self) -> None:
        if self._pending:
            await asyncio.wait(self._pending, timeout=5)
        await self.http.aclose()
