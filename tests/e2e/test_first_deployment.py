"""The "First deployment" guide, command by command, on PostgreSQL with DEBUG=false, up to the
first approved decision executed by the real refund agent.

The commands run as subprocesses against a fresh database (created here, dropped after), with the
environment the README exports; Daphne and the worker run as the README starts them. What the test
does by hand is what a person does: read the printed password and tokens, sign in, enroll an
authenticator from the key the page shows, approve from the queue."""

import asyncio
import base64
import json
import os
import re
import secrets
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import jwt
import psycopg
import pytest
from a2a.types import (
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from django.conf import settings as django_settings
from django_otp.oath import TOTP

from tests.examples.harness import AgentClient, AgentProcess, free_port
from tests.reviewer_processes import REPO, ServerProcess
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e]

DATABASE = django_settings.DATABASES["default"]
requires_postgres = pytest.mark.skipif(
    "postgresql" not in DATABASE["ENGINE"], reason="the first deployment is on PostgreSQL (set DATABASE_URL)"
)


@pytest.fixture
def fresh_database():
    """An empty database, as `createdb` makes one; dropped afterwards."""
    name = f"first_deployment_{uuid.uuid4().hex[:8]}"
    server: dict[str, Any] = {
        "host": DATABASE["HOST"] or "127.0.0.1",
        "port": DATABASE["PORT"] or 5432,
        "user": DATABASE["USER"],
        "password": DATABASE["PASSWORD"] or None,
    }
    with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    credentials = DATABASE["USER"] + (f":{DATABASE['PASSWORD']}" if DATABASE["PASSWORD"] else "")
    try:
        yield f"postgres://{credentials}@{server['host']}:{server['port']}/{name}", {"dbname": name, **server}
    finally:
        with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Deployment:
    def __init__(self, tmp_path: Path, database_url: str):
        self.port = free_port()
        # localhost, not 127.0.0.1: a browser counts only localhost (and https) as a secure context, and
        # passkeys need one.
        self.url = f"http://localhost:{self.port}"
        self.log_dir = tmp_path / "logs"
        self.log_dir.mkdir()
        # The README's data directory is under $HOME (no step needs root): here under tmp_path.
        self.data_dir = tmp_path / "home" / "reviewer-data"
        keys = self.data_dir / "keys"
        keys.mkdir(parents=True)
        keys.chmod(0o700)
        # The README's export line (plain HTTP on one machine: cookies not marked secure).
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("REVIEWER_", "DATABASE_", "SECRET_KEY", "DJANGO_", "DEBUG"))
        }
        self.env.update(
            {
                "PYTHONPATH": str(REPO),
                "DEBUG": "false",
                "SECRET_KEY": secrets.token_urlsafe(50),
                "ALLOWED_HOSTS": "localhost",
                "REVIEWER_ISSUER": self.url,
                "REVIEWER_DATA_DIR": str(self.data_dir),
                "DATABASE_URL": database_url,
                "REVIEWER_SIGNING_KEY_DIR": str(keys),
                "AGENT_ALLOWED_NETWORKS": "127.0.0.0/8",
                "SESSION_COOKIE_SECURE": "false",
                "CSRF_COOKIE_SECURE": "false",
                "SECURE_SSL_REDIRECT": "false",
                "SECURE_HSTS_SECONDS": "0",
            }
        )
        self.processes: list[ServerProcess] = []

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=REPO, env=self.env, capture_output=True, text=True
        )
        assert done.returncode == 0, f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def start(self, name: str, args: list[str]) -> ServerProcess:
        process = ServerProcess(name, args, env=self.env, log_dir=self.log_dir).start()
        self.processes.append(process)
        return process

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.log()}" for p in self.processes)

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()


def printed(output: str, label: str) -> str:
    match = re.search(re.escape(label) + r"\s*(\S+)", output)
    assert match, f"{label!r} not in:\n{output}"
    return match.group(1)


def code_for(secret_for_typing: str, *, steps_ahead: int = 0) -> str:
    """What an authenticator shows for the key the enrollment page printed (one step of drift allowed)."""
    key = base64.b32decode(
        secret_for_typing.replace(" ", "") + "=" * (-len(secret_for_typing.replace(" ", "")) % 8)
    )
    totp = TOTP(key)
    totp.time = time.time() + 30 * steps_ahead
    return f"{totp.token():06d}"


def ask_refund(agent_url: str, webhook: str, push_token: str) -> str:
    async def run():
        client = await AgentClient.connect(agent_url)
        try:
            message = Message(
                message_id=str(uuid.uuid4()),
                role=Role.ROLE_USER,
                parts=[Part(text="Please refund EUR 40.00 for order 1182 (the parcel never arrived)")],
                metadata={"principal": {"id": "rita", "display": "Rita Requester"}},
            )
            configuration = SendMessageConfiguration(
                return_immediately=True,
                task_push_notification_config=TaskPushNotificationConfig(url=webhook, token=push_token),
            )
            replies = [
                r
                async for r in client.client.send_message(
                    SendMessageRequest(message=message, configuration=configuration)
                )
            ]
            task, _ = await client.wait_parked(replies[-1].task.id)
            return task.id
        finally:
            await client.close()

    return asyncio.run(run())


def task_state(agent_url: str, task_id: str) -> str:
    async def run():
        client = await AgentClient.connect(agent_url)
        try:
            return TaskState.Name((await client.wait_terminal(task_id)).status.state)
        finally:
            await client.close()

    return asyncio.run(run())


@requires_postgres
def test_the_first_deployment_section_reaches_a_first_approved_decision(tmp_path, fresh_database):
    database_url, connect = fresh_database
    deployment = Deployment(tmp_path, database_url)
    agent = AgentProcess(state_dir=tmp_path / "refund-agent", reviewer_url=deployment.url)
    browser = httpx.Client(base_url=deployment.url, timeout=15)
    try:
        # --- the commands, as the README gives them ---
        deployment.manage("migrate")
        deployment.manage("collectstatic", "--noinput")
        assert "first signing key" in deployment.manage("rotate_signing_key")
        people = deployment.manage(
            "setup_tenant", "acme", "--name", "Acme", "--group", "finance", "--create-users",
            "--role", "dana:admin", "--role", "erin:admin", "--member", "alice:finance",
        )  # fmt: skip
        # It reports what it did: dana and erin are admins, in the admins group, and use /admin/.
        assert "dana: admin; groups: admins; uses /admin/" in people, people
        assert "alice: reviewer; groups: finance" in people, people
        registered = deployment.manage(
            "register_agent", "--tenant", "acme", "--slug", "refunds", "--name", "Refund agent",
            "--card-url", agent.audience,
        )  # fmt: skip
        push_token = printed(registered, "push token (shown once):")
        api_token = printed(registered, "API token (shown once):")
        assert not push_token.startswith("-") and not api_token.startswith("-")
        daphne_args = ["-b", "127.0.0.1", "-p", str(deployment.port), "reviewer.asgi:application"]
        daphne = deployment.start("daphne", [sys.executable, "-m", "daphne", *daphne_args])
        daphne.wait_until(lambda: _answers(f"{deployment.url}/.well-known/jwks.json"), "the JWKS")
        worker = deployment.start("worker", [sys.executable, "manage.py", "run_worker"])
        worker.wait_until(lambda: worker.logged("worker started"), "'worker started'")
        agent.args += ["--api-token", api_token]  # the printed token (the last --api-token wins)
        agent.start()

        # --- an agent asks; nothing matches a policy, so the tenant admins decide ---
        task_id = ask_refund(agent.url, f"{deployment.url}/a2a/push/refunds/", push_token)

        # --- dana signs in with the printed password, enrolls an authenticator and approves; a refund
        # cannot be undone (R3), so the tenant default asks a second admin: erin does the same ---
        page = sign_in_enroll_and_approve(deployment, browser, people, "dana")
        assert "tenant-default@1" in page
        assert_static_files_load(browser, page)
        assert browser.get("/admin/tenants/approvergroup/").status_code == 200  # /admin/ for her tenant
        with httpx.Client(base_url=deployment.url, timeout=15) as second:
            sign_in_enroll_and_approve(deployment, second, people, "erin")

        # --- the agent verified, consumed and refunded once ---
        assert task_state(agent.url, task_id) == "TASK_STATE_COMPLETED"
        ledger = agent.state_dir / "ledger.jsonl"
        (refund,) = [json.loads(line) for line in ledger.read_text().splitlines()]
        with psycopg.connect(**connect) as db:
            row = db.execute("SELECT token FROM approvals_decision").fetchone()
        assert row is not None
        (token,) = row
        claims = jwt.decode(token, options={"verify_signature": False})
        assert claims["policy"] == {"id": "tenant-default", "version": 1}
        assert refund["idempotency_key"] == claims["jti"]
    finally:
        browser.close()
        agent.stop()
        deployment.stop()
        sys.stdout.write(deployment.logs() + f"\n--- agent\n{agent.log()[-5000:]}")


def assert_static_files_load(browser, page: str) -> None:
    """With DEBUG=false the page's CSS and scripts come from ServeStatic under hashed names, cached for
    good (a new release has new names)."""
    stylesheets = re.findall(r'<link rel="stylesheet" href="([^"]+)"', page)
    scripts = re.findall(r'<script src="([^"]+)"', page)
    assert stylesheets and len(scripts) >= 2, page[:1500]
    for path in stylesheets + scripts:
        assert re.search(r"\.[0-9a-f]{12}\.(css|js)$", path), f"{path} has no hashed name"
        response = browser.get(path)
        assert response.status_code == 200, f"{path}: {response.status_code}"
        assert "immutable" in response.headers.get("cache-control", ""), response.headers
        kind = "text/css" if path.endswith(".css") else "javascript"
        assert kind in response.headers["content-type"], (path, response.headers["content-type"])


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def sign_in_enroll_and_approve(deployment, browser, people: str, name: str) -> str:
    """As the README says: sign in with the printed password, enroll an authenticator from the page's
    key, find the request in the queue and approve it with a fresh code. Returns the proposal page."""
    password = printed(people, f"created user {name}, password (shown once):")
    browser.get("/accounts/login/")
    signed_in = browser.post(
        "/accounts/login/",
        data={"csrfmiddlewaretoken": browser.cookies["csrftoken"], "username": name, "password": password},
    )
    assert signed_in.status_code == 302 and signed_in.headers["location"].endswith("/accounts/enroll/")
    enroll_page = browser.get("/accounts/enroll/").text
    secret_match = re.search(r'<code class="secret">([A-Z2-7 ]+)</code>', enroll_page)
    assert secret_match is not None
    secret = secret_match.group(1)
    enrolled = browser.post(
        "/accounts/enroll/",
        data={"csrfmiddlewaretoken": browser.cookies["csrftoken"], "otp_token": code_for(secret)},
    )
    assert enrolled.status_code == 200 and "backup" in enrolled.text.lower(), enrolled.text[:2000]
    proposal_path = wait_until(
        lambda: re.search(r'href="(/proposals/[0-9a-f-]{36}/)"', browser.get("/").text),
        f"the request in {name}'s queue",
        timeout=30,
        detail=deployment.logs,
    ).group(1)  # type: ignore[union-attr]  # wait_until returns the condition's value once truthy: a match
    page = browser.get(proposal_path).text
    digest_match = re.search(r'name="digest" value="([^"]+)"', page)
    assert digest_match is not None
    digest = digest_match.group(1)
    decided = browser.post(
        proposal_path + "decide",
        data={
            "csrfmiddlewaretoken": browser.cookies["csrftoken"],
            "action": "approve",
            "digest": digest,
            "reason": "",
            "otp_code": code_for(secret, steps_ahead=1),  # the enrollment used this step's code
        },
    )
    assert decided.status_code == 302, decided.text[:2000]
    return page
