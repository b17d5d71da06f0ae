"""Wiring: the agent card, durable stores, the gate, and the Starlette app (JSON-RPC at `/`)."""

import contextlib
import logging

import httpx
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import DatabasePushNotificationConfigStore, DatabaseTaskStore
from a2a.types import AgentCapabilities, AgentCard, AgentExtension, AgentInterface, AgentSkill
from sqlalchemy import event
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.applications import Starlette

from examples.refund_agent.config import AgentSettings
from examples.refund_agent.executor import RefundExecutor
from examples.refund_agent.payments import DownstreamPayments, LedgerPayments
from examples.refund_agent.state import AgentState
from reviewer_gate import EXTENSION_URI, ReviewerClient, SQLiteUsedStore
from reviewer_gate.a2a import A2AApprovals, RetryOverloaded, ReviewerPushSender, SQLiteRequestStore

logger = logging.getLogger(__name__)


def build_agent_card(settings: AgentSettings) -> AgentCard:
    return AgentCard(
        name="Refund agent (demo)",
        description="Refunds an order after a signed approval from Reviewer.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=f"{settings.public_url}/", protocol_binding="JSONRPC", protocol_version="1.0"),
        ],
        capabilities=AgentCapabilities(
            streaming=False,
            push_notifications=True,
            extensions=[
                AgentExtension(
                    uri=EXTENSION_URI,
                    description=(
                        "Parks each refund in TASK_STATE_AUTH_REQUIRED with an approval request and acts "
                        "only on a signed Reviewer decision sent back in the message metadata."
                    ),
                    required=False,
                )
            ],
        ),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain", "application/json"],
        skills=[
            AgentSkill(
                id="refund",
                name="Refund an order",
                description="Refunds an amount for an order once a human approved the exact refund.",
                tags=["payments", "refund", "approval"],
                examples=["Please refund EUR 40.00 for order 1182 (customer says the parcel never arrived)"],
            )
        ],
    )


def build_approvals(settings: AgentSettings) -> A2AApprovals:
    client = ReviewerClient(
        reviewer_url=settings.reviewer_url,
        api_token=settings.api_token,
        audience=settings.audience,
        issuer=settings.issuer,
        jwks_url=settings.jwks_url,
        tenant=settings.tenant,
        agent=settings.agent_slug,
        # Shared by every agent process using this state dir: only one of them can act on a decision.
        used_store=SQLiteUsedStore(settings.state_dir / "used_decisions.sqlite3"),
    )
    return A2AApprovals(
        client,
        SQLiteRequestStore(settings.state_dir / "agent_state.sqlite3"),
        # --no-rest-intake: Reviewer learns of parked tasks only by push or by listing them (ListTasks).
        announce=settings.rest_intake,
    )


def _write_ahead_log(dbapi_connection, _record) -> None:
    """The task store in WAL mode, as the agent's other SQLite files (reviewer_gate.sqlite_files): a
    commit syncs the WAL once, where SQLite's default rollback journal synced the journal, the database
    and the folder (strace of the demo: 5 task-store commits per refund, 4 or 5 fsyncs each). Durability
    is unchanged: synchronous stays FULL."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


def build_app(settings: AgentSettings) -> Starlette:
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    # A write waits for the file lock up to 30 s (sqlite3's default 5 s failed SendMessage with "database
    # is locked" under the load test, after the request had already reached Reviewer).
    engine = create_async_engine(
        f"sqlite+aiosqlite:///{settings.state_dir / 'a2a_tasks.sqlite3'}", connect_args={"timeout": 30}
    )
    event.listen(engine.sync_engine, "connect", _write_ahead_log)
    task_store = DatabaseTaskStore(engine)
    push_store = DatabasePushNotificationConfigStore(engine)
    # Pushes to Reviewer wait out its overload answers (503 + Retry-After) instead of being dropped.
    push_http = httpx.AsyncClient(timeout=15, transport=RetryOverloaded())
    # Reviewer's webhook gets only the events it reads (a parked request, a final state): each push is
    # awaited before the task's next event is handled. No push_url_validator: the demo's webhook is on
    # loopback, which the SDK's validator refuses.
    push_sender = ReviewerPushSender(
        push_http, push_store, reviewer_urls={settings.reviewer_url, settings.issuer}
    )
    payments = (
        DownstreamPayments(settings.downstream_url)
        if settings.downstream_url
        else LedgerPayments(settings.ledger)
    )
    approvals = build_approvals(settings)
    executor = RefundExecutor(
        approvals=approvals,
        state=AgentState(settings.state_dir / "agent_state.sqlite3"),
        payments=payments,
        task_store=task_store,
        approval_ttl_seconds=settings.approval_ttl_seconds,
    )
    card = build_agent_card(settings)
    handler = DefaultRequestHandler(
        agent_executor=executor,
        task_store=task_store,
        agent_card=card,
        push_config_store=push_store,
        push_sender=push_sender,
        # Approvals take hours: release a parked task's in-memory state; a later message reloads it.
        interrupted_task_timeout=settings.interrupted_task_timeout,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await task_store.initialize()
        await push_store.initialize()
        logger.info(
            "refund agent on %s (audience %s, %s)",
            settings.public_url,
            settings.audience,
            f"downstream {settings.downstream_url}"
            if settings.downstream_url
            else f"ledger {settings.ledger}",
        )
        try:
            yield
        finally:
            await handler.aclose()
            await approvals.aclose()
            await payments.aclose()
            await push_http.aclose()
            await engine.dispose()

    return Starlette(
        routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/")],
        lifespan=lifespan,
    )
