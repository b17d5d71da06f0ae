"""Where the refund actually happens: a JSON Lines ledger file, or a payments service over HTTP.

Both take an idempotency key (the decision's jti) and give the same answer for the same key, so a
retry can never refund twice. The HTTP service can lose a response; `refund_settled` then asks the
service by idempotency key before trying again, and never asks for a new approval.
"""

import asyncio
import fcntl
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from urllib.parse import quote

import httpx

logger = logging.getLogger(__name__)

SUCCEEDED, FAILED, UNKNOWN = "succeeded", "failed", "unknown"


@dataclass(frozen=True)
class Refund:
    idempotency_key: str
    order_id: str
    amount: str
    currency: str

    def body(self) -> dict:
        return {"order_id": self.order_id, "amount": self.amount, "currency": self.currency}


@dataclass(frozen=True)
class RefundOutcome:
    status: str  # succeeded | failed | unknown
    transaction_id: str | None = None
    detail: str = ""


class LedgerPayments:
    """Refunds appended to a JSON Lines file, one line per idempotency key.

    The file lock makes "is this key already there? if not, append" one step, even when two agent
    processes share the file.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def _refund_locked(self, refund: Refund) -> RefundOutcome:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a+", encoding="utf-8") as ledger:
            fcntl.flock(ledger, fcntl.LOCK_EX)
            ledger.seek(0)
            for line in ledger:
                entry = json.loads(line)
                if entry["idempotency_key"] == refund.idempotency_key:
                    return RefundOutcome(
                        SUCCEEDED, entry["transaction_id"], "already recorded under this key"
                    )
            entry = {
                "transaction_id": f"ledger_{uuid.uuid4().hex[:16]}",
                "idempotency_key": refund.idempotency_key,
                **refund.body(),
            }
            ledger.write(json.dumps(entry) + "\n")
            ledger.flush()
            return RefundOutcome(SUCCEEDED, entry["transaction_id"])

    def _entries(self) -> list[dict]:
        if not self.path.exists():
            return []
        with self.path.open(encoding="utf-8") as ledger:
            return [json.loads(line) for line in ledger if line.strip()]

    async def refund(self, refund: Refund) -> RefundOutcome:
        return await asyncio.to_thread(self._refund_locked, refund)

    async def lookup(self, idempotency_key: str) -> RefundOutcome | None:
        for entry in await asyncio.to_thread(self._entries):
            if entry["idempotency_key"] == idempotency_key:
                return RefundOutcome(SUCCEEDED, entry["transaction_id"])
        return None

    async def refunded_total(self, order_id: str, currency: str) -> str | None:
        entries = await asyncio.to_thread(self._entries)
        total = sum(
            (
                Decimal(entry["amount"])
                for entry in entries
                if entry["order_id"] == order_id and entry["currency"] == currency
            ),
            Decimal("0"),
        )
        return f"{total:.2f}"

    async def aclose(self) -> None:
        return None


class LookupFailed(Exception):
    """The service could not say whether the key exists (try again later)."""


class DownstreamPayments:
    """The fake payments service of examples/downstream.py (or anything with the same API)."""

    def __init__(self, base_url: str, *, timeout: float = 5):
        self.base_url = base_url.rstrip("/")
        self.http = httpx.AsyncClient(timeout=timeout)

    async def refund(self, refund: Refund) -> RefundOutcome:
        try:
            response = await self.http.post(
                f"{self.base_url}/refunds",
                json=refund.body(),
                headers={"Idempotency-Key": refund.idempotency_key},
            )
        except (httpx.ConnectError, httpx.ConnectTimeout) as error:
            # No connection, so no request: the refund certainly did not happen.
            return RefundOutcome(FAILED, detail=f"payments service unreachable: {error!r}")
        except httpx.HTTPError as error:
            # Sent, but the answer was lost: it may or may not have been committed.
            return RefundOutcome(UNKNOWN, detail=f"response lost: {error!r}")
        if response.status_code >= 500:
            return RefundOutcome(UNKNOWN, detail=f"payments service answered HTTP {response.status_code}")
        if not response.is_success:
            return RefundOutcome(
                FAILED, detail=f"payments service refused: HTTP {response.status_code} {response.text[:300]}"
            )
        return RefundOutcome(SUCCEEDED, response.json()["transaction_id"])

    async def lookup(self, idempotency_key: str) -> RefundOutcome | None:
        """The refund made under this key, None if the service has none. Raises LookupFailed."""
        try:
            response = await self.http.get(f"{self.base_url}/refunds/{quote(idempotency_key, safe='')}")
        except httpx.HTTPError as error:
            raise LookupFailed(repr(error)) from error
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise LookupFailed(f"HTTP {response.status_code}")
        return RefundOutcome(SUCCEEDED, response.json()["transaction_id"])

    async def refunded_total(self, order_id: str, currency: str) -> str | None:
        """Sum of earlier refunds for the order, for the reviewer's diff; None if it cannot be read."""
        try:
            response = await self.http.get(f"{self.base_url}/refunds")
            response.raise_for_status()
            refunds = response.json()["refunds"]
        except (httpx.HTTPError, ValueError, KeyError):
            return None
        total = sum(
            (
                Decimal(refund["amount"])
                for refund in refunds
                if refund["order_id"] == order_id and refund["currency"] == currency
            ),
            Decimal("0"),
        )
        return f"{total:.2f}"

    async def aclose(self) -> None:
        await self.http.aclose()


async def reconcile(
    payments, refund: Refund, *, attempts: int = 6, first_delay: float = 0.2
) -> RefundOutcome:
    """Settle an unknown outcome: ask by idempotency key; if the service definitely has no such refund,
    send the same request again (same key, so it cannot double). Bounded; may still end unknown."""
    delay = first_delay
    last_detail = "not reconciled"
    for attempt in range(1, attempts + 1):
        try:
            found = await payments.lookup(refund.idempotency_key)
        except LookupFailed as error:
            last_detail = f"lookup failed: {error}"
        else:
            if found is not None:
                return RefundOutcome(SUCCEEDED, found.transaction_id, "reconciled by idempotency key")
            retried = await payments.refund(refund)
            if retried.status != UNKNOWN:
                return retried
            last_detail = retried.detail
        logger.info(
            "refund %s still unknown after attempt %d: %s", refund.idempotency_key, attempt, last_detail
        )
        if attempt < attempts:
            await asyncio.sleep(delay)  # back off: the service may be restarting
            delay = min(delay * 2, 2.0)
    return RefundOutcome(UNKNOWN, detail=f"still unknown after {attempts} attempts: {last_detail}")


async def refund_settled(
    payments, refund: Refund, on_unknown: Callable[[RefundOutcome], Awaitable[None]]
) -> RefundOutcome:
    """Refund once; if the answer is lost, report it through `on_unknown` and reconcile."""
    outcome = await payments.refund(refund)
    if outcome.status != UNKNOWN:
        return outcome
    await on_unknown(outcome)
    return await reconcile(payments, refund)
