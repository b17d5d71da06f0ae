"""A small REST client for agents that are not A2A servers (MCP, LangGraph, OpenAI Agents, scripts).

It does what DESIGN.md "A2A contract" asks of an agent, over Reviewer's REST API:

1. submit the approval request: `POST /api/v1/proposals` (idempotent on task id and request id, so
   retrying after a lost answer is safe); when policy decided at intake (allowed or denied) the answer
   carries the signed decision as `token`, and step 2 is skipped; `request_approval` asks Reviewer to
   consume an approval made there at once (`Prefer: consume`), and then step 4 is skipped too;
2. otherwise wait for the signed decision: `GET /api/v1/proposals/<id>/decision?wait=<s>` (a bounded
   long poll that holds no server resources while it waits, repeated until the decision exists or the
   proposal closed without one);
3. verify it with the gate against what the agent asked for (never against anything in the answer);
4. consume it right before the side effect (approved decisions only);
5. report the outcome afterwards.

    client = ReviewerClient(reviewer_url=..., api_token=..., audience=..., tenant="acme", agent="refunds")
    approval = client.request_approval(action, summary="Refund EUR 40.00", principal={"id": "u-7"})
    result = do_it(approval.action, idempotency_key=approval.idempotency_key)   # act once
    approval.report("succeeded", transaction_id=result.id)

`request_approval` returns only for an approved, verified and consumed decision; otherwise it raises
`NotApproved` (rejected, needs_info, expired, cancelled, revoked, ... and every GateError), and the
agent must not act. Every call blocks: from asyncio use `asyncio.to_thread`, or the async
`arequest_approval`, which waits without holding a thread between polls.

`tenant` (the agent's tenant slug in Reviewer) makes the gate refuse a decision signed for another
tenant (`wrong_tenant`); `agent` (the slug of its registration) is stated in every request it sends
(`request.agent`), so that Reviewer adopts a parked A2A task only into that registration.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

import httpx

from reviewer_gate.approval import (
    Approval,
    NotApproved,
    ReviewerUnavailable,
    Submission,
    Throttled,
    build_request,
    current_approval,
    rfc3339,
    running_under,
    still_waiting,
)
from reviewer_gate.gate import (
    Gate,
    GateError,
    JWKSKeySource,
    KeptAliveClient,
    MemoryUsedStore,
    UsedDecisionStore,
    manifest_digest,
)
from reviewer_gate.tracing import trace_headers

__all__ = [
    "Approval",
    "BatchRefused",
    "NotApproved",
    "ReviewerClient",
    "ReviewerUnavailable",
    "Submission",
    "Throttled",
    "build_request",
    "current_approval",
    "rfc3339",
    "running_under",
]

logger = logging.getLogger(__name__)

RETRIED_STATUSES = frozenset({502, 503, 504})  # with Retry-After honoured (503: overloaded)
THROTTLED = 429  # never retried here: Reviewer asks this agent to slow down, and the caller decides


def _retry_after(response: httpx.Response) -> float:
    """Seconds from a Retry-After header in seconds (capped at 10), or 0."""
    try:
        return min(max(float(response.headers.get("Retry-After", "0")), 0.0), 10.0)
    except ValueError:
        return 0.0


MAX_WAIT_SECONDS = 60  # the server's bound on one long poll

# Refusals that say the calls may still be asked about one by one: no batch rule for a tool, or more
# members or a larger total than the rule allows (docs/agents/errors.md). The adapters fall back to them.
NOT_AS_A_BATCH = frozenset({"not_batchable", "batch_too_large", "batch_over_total"})


def preference_names(header: str) -> set[str]:
    """The preferences a Prefer or Preference-Applied header names (RFC 7240), without their values
    and parameters: "decision-in-answer, consume" → {"decision-in-answer", "consume"}."""
    return {item.split(";")[0].split("=")[0].strip().lower() for item in header.split(",") if item.strip()}


class BatchRefused(ValueError):
    """Reviewer refused a batch as a whole; nothing was stored. `code` is the error's code
    (`not_batchable`, `manifest_mismatch`, ...): one of NOT_AS_A_BATCH means each member may still be
    asked about alone."""

    def __init__(self, code: str, message: str):
        super().__init__(f"Reviewer refused the batch: {message}")
        self.code = code


class ReviewerClient:
    """One agent's conversation with Reviewer (its API token, its audience)."""

    def __init__(
        self,
        *,
        reviewer_url: str,
        api_token: str | None,
        audience: str,
        issuer: str | None = None,
        jwks_url: str | None = None,
        used_store: UsedDecisionStore | None = None,
        gate: Gate | None = None,
        http_timeout: float = 10,
        retries: int = 4,
        backoff_seconds: float = 0.5,
        poll_seconds: int = 30,
        tenant: str | None = None,
        agent: str | None = None,
        progress_seconds: float = 5,
    ):
        self.reviewer_url = reviewer_url.rstrip("/")
        self.agent = agent  # the registration's slug, stated in each request (see `stamped`)
        self.api_token = api_token
        self.http_timeout = http_timeout
        self.retries = retries
        self.backoff_seconds = backoff_seconds
        self.poll_seconds = max(0, min(int(poll_seconds), MAX_WAIT_SECONDS))
        # How often `await_release` tells its `on_wait` that it still waits while a long poll is out (an
        # MCP client's progress callback hears from the gateway at once and then this often, not only
        # when a poll of up to `poll_seconds` returns).
        self.progress_seconds = max(0.1, float(progress_seconds))
        self._http = KeptAliveClient(http_timeout)  # one client for every call
        self.gate = gate or Gate(
            issuer=(issuer or self.reviewer_url).rstrip("/"),
            audience=audience,
            keys=JWKSKeySource(jwks_url or f"{self.reviewer_url}/.well-known/jwks.json"),
            # One process by default; pass SQLiteUsedStore (or your own) when several processes act.
            used_store=used_store or MemoryUsedStore(),
            reviewer_url=self.reviewer_url,
            api_token=api_token,
            tenant=tenant,
        )

    # --- HTTP with retries -----------------------------------------------------------------------

    def _client(self) -> httpx.Client:
        return self._http.get()

    def close(self) -> None:
        """Close the kept-alive connections, this client's and its gate's."""
        self._http.close()
        close_gate = getattr(self.gate, "close", None)
        if close_gate is not None:
            close_gate()

    def _headers(self) -> dict[str, Any]:
        headers = {"Accept": "application/json", **trace_headers()}  # the agent's span, if any
        if self.api_token:
            headers["Authorization"] = f"Bearer {self.api_token}"
        return headers

    def _call(
        self,
        method: str,
        path: str,
        *,
        json: dict[str, Any] | None = None,
        timeout: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """One request, retried with exponential backoff on connection errors and 502/503/504 (at most
        `retries` times). A 429 raises Throttled at once: the agent is over a quota and must slow down,
        which only the caller can decide how to do.

        Only idempotent calls go through here (submit is idempotent on task and request id; the pull
        is a read). Consume and outcome are the gate's, which never retries a consume.
        """
        url = f"{self.reviewer_url}{path}"
        delay = self.backoff_seconds
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                response = self._client().request(
                    method,
                    url,
                    json=json,
                    headers={**self._headers(), **(headers or {})},
                    timeout=timeout or self.http_timeout,
                )
            except httpx.HTTPError as error:
                if last:
                    raise ReviewerUnavailable(f"{method} {url}: {error!r}") from error
                logger.info("%s %s failed (%r); retrying in %.1fs", method, url, error, delay)
            else:
                if response.status_code == THROTTLED:
                    raise Throttled.from_response(response)
                if response.status_code not in RETRIED_STATUSES:
                    return response
                if last:
                    raise ReviewerUnavailable(f"{method} {url}: HTTP {response.status_code}")
                delay = max(delay, _retry_after(response))  # an overloaded Reviewer says when to come back
                logger.info("%s %s answered %s; retrying in %.1fs", method, url, response.status_code, delay)
            time.sleep(delay)  # backoff between retries of a failed call
            delay = min(delay * 2, 10)
        raise AssertionError("unreachable")

    @staticmethod
    def _error(response: httpx.Response) -> str:
        try:
            error = response.json().get("error") or {}
            return f"{error.get('code')}: {error.get('message')}" + (
                f" (field {error['field']})" if error.get("field") else ""
            )
        except (ValueError, AttributeError):
            return f"HTTP {response.status_code}: {response.text[:200]}"

    # --- the steps -------------------------------------------------------------------------------

    def stamped(self, request: dict[str, Any]) -> dict[str, Any]:
        """The request naming this agent's registration (`agent`), when the client was given one."""
        if not self.agent or request.get("agent"):
            return request
        return {**request, "agent": self.agent}

    def submit(
        self,
        request: dict[str, Any],
        *,
        task_id: str | None = None,
        context_id: str = "",
        decision_in_answer: bool = True,
        consume: bool = False,
    ) -> Submission:
        """Announce the request. `task_id` names the unit of work the decision is bound to (`sub`).
        `decision_in_answer`: the caller acts on a decision policy makes at intake from this answer
        (`Submission.token`), so Reviewer holds the task's A2A continuation (`Prefer: decision-in-answer`);
        False for a caller that waits for the continuation instead. `consume`: an approval policy makes
        at intake is consumed for this agent in the same request (`Prefer: consume`); then
        `Submission.consumed` is true and `release` verifies without consuming. Only for a caller that
        acts right after this answer: the approval's one execution is spent when it arrives."""
        request = self.stamped(request)
        task_id = task_id or f"task-{uuid.uuid4()}"
        body = {"task_id": task_id, "context_id": context_id, "request": request}
        # RFC 7240 preferences; a Reviewer that knows neither ignores them.
        preferences = ["decision-in-answer"] * decision_in_answer + ["consume"] * consume
        headers = {"Prefer": ", ".join(preferences)} if preferences else None
        response = self._call("POST", "/api/v1/proposals", json=body, headers=headers)
        if response.status_code not in (200, 201):
            raise ValueError(f"Reviewer refused the request: {self._error(response)}")
        receipt = response.json()
        return Submission(
            task_id,
            context_id,
            request,
            receipt["proposal_id"],
            receipt["state"],
            receipt.get("token") or None,
            consumed=consume
            and "consume" in preference_names(response.headers.get("Preference-Applied", "")),
        )

    def read_proposal(self, proposal_id: str) -> dict[str, Any] | None:
        """`GET /api/v1/proposals/<id>`: the proposal's state and decision summary, None when Reviewer
        knows no such proposal of this agent."""
        response = self._call("GET", f"/api/v1/proposals/{quote(proposal_id, safe='')}")
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise ReviewerUnavailable(f"GET proposal {proposal_id}: {self._error(response)}")
        body: dict[str, Any] = response.json()
        return body

    def poll_decision(self, proposal_id: str, *, wait: int | None = None) -> tuple[str | None, str]:
        """One long poll: (token, state). The token is None while undecided or when it never will be."""
        wait = self.poll_seconds if wait is None else max(0, min(int(wait), MAX_WAIT_SECONDS))
        path = f"/api/v1/proposals/{quote(proposal_id, safe='')}/decision?wait={wait}"
        response = self._call("GET", path, timeout=wait + self.http_timeout)
        if response.status_code != 200:
            raise ReviewerUnavailable(f"GET {path}: {self._error(response)}")
        body = response.json()
        return body.get("token"), str(body.get("state") or "")

    def _next_wait(self, started: float, timeout: float | None) -> int:
        """One long poll's wait: `poll_seconds`, shortened so the caller's deadline is kept."""
        if timeout is None:
            return self.poll_seconds
        return max(0, min(self.poll_seconds, int(timeout - (time.monotonic() - started)) + 1))

    def wait_for_token(
        self,
        submission: Submission,
        *,
        timeout: float | None = None,
        on_wait: Callable[[str, float], None] | None = None,
    ) -> str:
        """The decision's token: the one the intake answer carried, or long-poll until it exists. Raises
        NotApproved when the proposal closed without one (expired, cancelled, ...) or `timeout` seconds
        passed. `on_wait(state, elapsed)` after each poll."""
        if submission.token:
            return submission.token
        return self.wait_for_proposal(submission.proposal_id, timeout=timeout, on_wait=on_wait)

    def wait_for_proposal(
        self,
        proposal_id: str,
        *,
        timeout: float | None = None,
        on_wait: Callable[[str, float], None] | None = None,
    ) -> str:
        """`wait_for_token` by proposal id (e.g. one kept in a paused graph's interrupt)."""
        started = time.monotonic()
        while True:
            token, state = self.poll_decision(proposal_id, wait=self._next_wait(started, timeout))
            if token:
                return token
            elapsed = still_waiting(state, started, timeout)
            if on_wait is not None:
                on_wait(state, elapsed)

    def release(self, submission: Submission, token: str) -> Approval:
        """Verify the token against the submission, then consume it. Raises NotApproved on any doubt."""
        try:
            decision = self.gate.verify(
                token,
                task_id=submission.task_id,
                request_id=submission.request_id,
                action_digest=submission.action_digest,
                expires_at=submission.request.get("expires_at"),
            )
        except GateError as error:
            raise NotApproved(error.code, error.message) from error
        if not decision.approved:
            raise NotApproved(decision.decision, decision.reason, decision=decision)
        action = decision.action if decision.edited else submission.request["action"]
        if not isinstance(action, dict):
            raise NotApproved("bad_claim", "the decision carries no action to execute", decision=decision)
        if decision.consume and not submission.consumed:  # consumed at intake: verified, not again
            try:
                self.gate.consume(decision)  # right before the side effect; fails closed
            except GateError as error:
                raise NotApproved(error.code, error.message, decision=decision) from error
        return Approval(decision=decision, action=action, submission=submission, client=self)

    def request_approval(
        self,
        action: dict[str, Any],
        *,
        summary: str,
        principal: dict[str, Any],
        task_id: str | None = None,
        context_id: str = "",
        timeout: float | None = None,
        on_wait: Callable[[str, float], None] | None = None,
        **request_fields: Any,
    ) -> Approval:
        """Submit, wait (unless policy decided at intake), verify, consume (at intake when policy allowed
        there: `Prefer: consume`): returns only when the agent may act (see the module doc)."""
        request = build_request(action, summary=summary, principal=principal, **request_fields)
        submission = self.submit(request, task_id=task_id, context_id=context_id, consume=True)
        token = self.wait_for_token(submission, timeout=timeout, on_wait=on_wait)
        return self.release(submission, token)

    # --- batches (docs/agents/batches.md) --------------------------------------------------------

    def submit_batch(
        self,
        requests: list[dict[str, Any]],
        *,
        batch_id: str | None = None,
        summary: str = "",
        task_id: str | None = None,
        context_id: str = "",
    ) -> list[Submission]:
        """Announce built requests as one batch (idempotent on task and batch id); one Submission per
        member, in order. The manifest digest is computed here from the members' own digests. Raises
        BatchRefused (a ValueError) when Reviewer refuses the batch."""
        requests = [self.stamped(request) for request in requests]
        task_id = task_id or f"task-{uuid.uuid4()}"
        body = {
            "task_id": task_id,
            "context_id": context_id,
            "batch_id": batch_id or f"batch-{uuid.uuid4()}",
            "summary": summary[:200],
            "manifest_digest": manifest_digest([str(request["action_digest"]) for request in requests]),
            "members": requests,
        }
        response = self._call("POST", "/api/v1/batches", json=body)
        if response.status_code not in (200, 201):
            try:
                code = str((response.json().get("error") or {}).get("code") or response.status_code)
            except (ValueError, AttributeError):
                code = str(response.status_code)
            raise BatchRefused(code, self._error(response))
        stored = {member["request_id"]: member for member in response.json()["members"]}
        return [
            Submission(
                task_id,
                context_id,
                request,
                stored[request["request_id"]]["proposal_id"],
                stored[request["request_id"]]["state"],
                stored[request["request_id"]].get("token") or None,
            )
            for request in requests
        ]

    def request_approvals(
        self,
        members: list[dict[str, Any]],
        *,
        principal: dict[str, Any],
        summary: str = "",
        batch_id: str | None = None,
        task_id: str | None = None,
        context_id: str = "",
        timeout: float | None = None,
    ) -> list[Approval | NotApproved]:
        """Ask about several actions as one batch with a fixed manifest: each of `members` is
        `{"action": {...}, "summary": "...", **request fields}` (as `request_approval` takes them).
        Waits for every member's decision, verifies each against its own request and consumes each
        approved one; returns, in order, an `Approval` (act on it, once) or the member's `NotApproved`
        (never act). `timeout` bounds the whole wait."""
        requests = [
            build_request(
                member["action"],
                summary=member.get("summary") or summary or str(member["action"].get("tool", "")),
                principal=member.get("principal", principal),
                **{k: v for k, v in member.items() if k not in {"action", "summary", "principal"}},
            )
            for member in members
        ]
        submissions = self.submit_batch(
            requests, batch_id=batch_id, summary=summary, task_id=task_id, context_id=context_id
        )
        started = time.monotonic()
        results: list[Approval | NotApproved] = []
        for submission in submissions:
            left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
            try:
                token = self.wait_for_token(submission, timeout=left)
                results.append(self.release(submission, token))
            except NotApproved as refused:
                results.append(refused)
        return results

    # --- asyncio ---------------------------------------------------------------------------------

    async def arequest_approval(
        self,
        action: dict[str, Any],
        *,
        summary: str,
        principal: dict[str, Any],
        task_id: str | None = None,
        context_id: str = "",
        timeout: float | None = None,
        on_wait: Callable[[str, float], Awaitable[None]] | None = None,
        **request_fields: Any,
    ) -> Approval:
        """`request_approval` for asyncio code: each HTTP call runs in a thread, `on_wait` is awaited
        between long polls (an MCP server sends its progress notifications from there)."""
        request = build_request(action, summary=summary, principal=principal, **request_fields)
        submission = await asyncio.to_thread(
            self.submit, request, task_id=task_id, context_id=context_id, consume=True
        )
        return await self.await_release(submission, timeout=timeout, on_wait=on_wait)

    async def await_release(
        self,
        submission: Submission,
        *,
        timeout: float | None = None,
        on_wait: Callable[[str, float], Awaitable[None]] | None = None,
    ) -> Approval:
        """Wait for the decision of a submitted request (unless the intake answer carried it), then verify
        and consume it (asyncio). `on_wait(state, seconds waited)` is awaited once right away, every
        `progress_seconds` while a long poll is out, and after each poll that brought no decision."""
        if submission.token:
            return await asyncio.to_thread(self.release, submission, submission.token)
        started = time.monotonic()
        state = submission.state
        if on_wait is not None:
            await on_wait(state, 0.0)
        while True:
            wait = self._next_wait(started, timeout)
            poll = asyncio.ensure_future(
                asyncio.to_thread(self.poll_decision, submission.proposal_id, wait=wait)
            )
            while on_wait is not None and not poll.done():
                finished, _ = await asyncio.wait({poll}, timeout=self.progress_seconds)
                if not finished:
                    await on_wait(state, time.monotonic() - started)
            token, state = await poll
            if token:
                return await asyncio.to_thread(self.release, submission, token)
            elapsed = still_waiting(state, started, timeout)
            if on_wait is not None:
                await on_wait(state, elapsed)
