"""Send a few realistic refund requests to the refund agent, as a customer-operations tool would.

    python -m examples.demo_client --agent-url http://127.0.0.1:8001 \\
        --webhook http://127.0.0.1:8000/a2a/push/refund-demo/ --push-token TOKEN [--count 3]

Each request registers Reviewer's webhook as the task's push notification config, returns at once,
and is then polled with GetTask until the agent has parked it in TASK_STATE_AUTH_REQUIRED.
"""

import argparse
import asyncio
import sys
import time
import uuid
from pathlib import Path

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import (
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils import TransportProtocol

EXTENSION_URI = "urn:reviewer:a2a:approval:v1"  # the same value as reviewer_gate.gate.EXTENSION_URI

SAMPLE_REQUESTS = [
    (
        "Please refund EUR 40.00 for order 1182 (customer says the parcel never arrived)",
        {"id": "cust-ops-7", "display": "Casey Ortiz (customer operations)"},
    ),
    (
        "Refund EUR 12.99 for order 1190: the mug arrived broken, photo attached to the ticket",
        {"id": "cust-ops-3", "display": "Sam Lee (customer operations)"},
    ),
    (
        "Please refund EUR 1,850.00 for order 1204 (the sofa was returned to the warehouse yesterday)",
        {"id": "cust-ops-7", "display": "Casey Ortiz (customer operations)"},
    ),
    (
        "Refund USD 75.50 for order 1211 (duplicate charge reported by the card holder)",
        {"id": "cust-ops-11", "display": "Noor Haddad (customer operations)"},
    ),
    (
        "Please refund GBP 9.00 for order 1219 (late delivery voucher promised by phone)",
        {"id": "cust-ops-3", "display": "Sam Lee (customer operations)"},
    ),
]
# After the samples, every further request is a new order: amounts and customers cycle, order numbers
# only grow. The client remembers how many it sent (--state-file), so a second run asks for new refunds
# instead of repeating the first ones.
GENERATED_ORDER_BASE = 1300
GENERATED_AMOUNTS = ("EUR 24.90", "EUR 310.00", "USD 58.25", "EUR 4,200.00", "GBP 17.50")
GENERATED_REASONS = (
    "the parcel was returned unopened",
    "the size was wrong and the customer sent it back",
    "a double charge shows on the card statement",
    "the item arrived damaged, photos in the ticket",
)


def request_number(index: int) -> tuple[str, dict]:
    """The index-th demo request of all runs: the samples first, then a new order each time."""
    if index < len(SAMPLE_REQUESTS):
        return SAMPLE_REQUESTS[index]
    extra = index - len(SAMPLE_REQUESTS)
    amount = GENERATED_AMOUNTS[extra % len(GENERATED_AMOUNTS)]
    reason = GENERATED_REASONS[extra % len(GENERATED_REASONS)]
    principal = SAMPLE_REQUESTS[extra % len(SAMPLE_REQUESTS)][1]
    return f"Please refund {amount} for order {GENERATED_ORDER_BASE + extra} ({reason})", principal


def _sent_so_far(state_file: Path) -> int:
    try:
        return int(state_file.read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


PARKED_OR_DONE = {
    TaskState.TASK_STATE_AUTH_REQUIRED,
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}


async def send_refund_request(client, text: str, principal: dict, webhook: str, push_token: str):
    message = Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
        metadata={"principal": principal},
    )
    configuration = SendMessageConfiguration(
        return_immediately=True,
        task_push_notification_config=TaskPushNotificationConfig(url=webhook, token=push_token),
    )
    responses = [
        response
        async for response in client.send_message(
            SendMessageRequest(message=message, configuration=configuration)
        )
    ]
    return responses[-1].task


async def wait_until_parked(client, task_id: str, timeout: float):
    """Poll GetTask: return_immediately answers with SUBMITTED, never with the parked state."""
    deadline = time.monotonic() + timeout
    while True:
        task = await client.get_task(GetTaskRequest(id=task_id))
        if task.status.state in PARKED_OR_DONE or time.monotonic() > deadline:
            return task
        await asyncio.sleep(0.2)


def summary_of(task) -> str:
    return " ".join(part.text for part in task.status.message.parts) or "(no status message)"


async def run(args) -> int:
    async with httpx.AsyncClient(timeout=30) as http:
        card = await A2ACardResolver(http, args.agent_url).get_agent_card()
        if EXTENSION_URI not in [extension.uri for extension in card.capabilities.extensions]:
            print(f"warning: {card.name} does not declare {EXTENSION_URI}", file=sys.stderr)
        config = ClientConfig(
            streaming=False, httpx_client=http, supported_protocol_bindings=[TransportProtocol.JSONRPC]
        )
        client = ClientFactory(config).create(card)
        parked = 0
        state_file = Path(args.state_file)
        first = _sent_so_far(state_file)
        for index in range(first, first + args.count):
            text, principal = request_number(index)
            submitted = await send_refund_request(client, text, principal, args.webhook, args.push_token)
            task = await wait_until_parked(client, submitted.id, args.timeout)
            state = TaskState.Name(task.status.state).removeprefix("TASK_STATE_")
            parked += task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
            print(f"{task.id}  {state:<13}  {summary_of(task)}")
            state_file.parent.mkdir(parents=True, exist_ok=True)
            state_file.write_text(str(index + 1))
        await client.close()
    return 0 if parked == args.count else 1


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m examples.demo_client", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--agent-url", default="http://127.0.0.1:8001")
    parser.add_argument(
        "--webhook", required=True, help="Reviewer's push URL for this agent, /a2a/push/<slug>/"
    )
    parser.add_argument("--push-token", required=True, help="the agent's push token registered in Reviewer")
    parser.add_argument("--count", type=int, default=3, help="how many new requests to send")
    parser.add_argument(
        "--state-file",
        default="data/demo/demo-client.sent",
        help="where the client counts the requests it sent, so the next run sends new orders",
    )
    parser.add_argument("--timeout", type=float, default=15, help="seconds to wait for each task to park")
    sys.exit(asyncio.run(run(parser.parse_args(argv))))


if __name__ == "__main__":
    main()
