"""Sending one claimed webhook outbox row (approvals/worker/delivery.py calls `send` for kind "webhook").

The request follows the Standard Webhooks specification through its reference library: the body is
the event's JSON, the headers `webhook-id` (the outbox message id: a retry carries the same id, so a
receiver can drop duplicates), `webhook-timestamp` and `webhook-signature` ("v1,<base64 HMAC-SHA256 of
id.timestamp.body>" under the endpoint's secret). It goes through the outbound allow-list transport
(lib/outbound.py), so a tenant admin's URL reaches only hosts the operator allowed. Anything but a
2xx answer, or none within the timeouts (approvals/notify/common.py `notify_timeout`), raises, and the
outbox retries it with backoff, then dead-letters it; the worker's webhook job also leaves the
endpoint out for a while (approvals/notify/lanes.py).
"""

import asyncio
import json

import httpx
from django.utils import timezone
from standardwebhooks import Webhook

from approvals.models.notifications import WebhookEndpoint
from approvals.notify.common import notify_timeout
from lib import outbound


class WebhookFailed(Exception):
    pass


def signed_request(endpoint: WebhookEndpoint, message_id: str, event: dict) -> tuple[bytes, dict]:
    body = json.dumps(event, separators=(",", ":"), sort_keys=True)
    now = timezone.now()
    signature = Webhook(endpoint.secret).sign(message_id, now, body)
    headers = {
        "content-type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature,
        "user-agent": "Reviewer-Webhooks/1",
    }
    return body.encode(), headers


async def _post(url: str, body: bytes, headers: dict) -> httpx.Response:
    async with outbound.async_client(timeout=notify_timeout(), follow_redirects=False) as client:
        return await client.post(url, content=body, headers=headers)


def send(message) -> str:
    endpoint = WebhookEndpoint.objects.filter(pk=message.payload.get("endpoint")).first()
    if endpoint is None or not endpoint.enabled:
        return "endpoint removed or disabled: not sent"
    body, headers = signed_request(endpoint, message.message_id, message.payload["event"])
    try:
        response = asyncio.run(_post(endpoint.url, body, headers))
    except outbound.HostNotAllowed:
        raise WebhookFailed("the endpoint's host is not on the outbound allow-list") from None
    except httpx.HTTPError as error:
        raise WebhookFailed(f"could not reach the endpoint ({type(error).__name__})") from None
    if not 200 <= response.status_code < 300:
        raise WebhookFailed(f"the endpoint answered {response.status_code}")
    return f"endpoint answered {response.status_code}"
