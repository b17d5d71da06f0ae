"""The deployment in deploy/ for real: Caddy (deploy/Caddyfile, unchanged) terminating TLS on loopback
in front of two Daphnes and a worker, on the test database and a Redis of this module, with DEBUG off
and collectstatic's output served by Caddy. Two reviewers sign in through it in Chromium and one sees
the other's vote live; /readyz follows the worker as it is killed and started again; and a Daphne
whose Redis or PostgreSQL is away answers /healthz but not /readyz, naming what fails.

Needs `caddy` (Debian's package: apt-get install -y caddy) and redis-server; the browser test needs
Debian's chromium. Every process binds 127.0.0.1 and is stopped by its PID.
"""

import datetime
import functools
import ipaddress
import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

import signing_keys as keys
from tests import factories
from tests.e2e.conftest import database_url, shared_signing_keys
from tests.examples.harness import free_port
from tests.faults.servers import PrivateRedis
from tests.reviewer_processes import (
    REPO,
    ServerProcess,
    answers,
    daphne,
    listening_socket,
    reviewer_env,
    start_all,
    url_of,
    worker,
)
from tests.waiting import wait_until

CADDY = shutil.which("caddy")
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not CADDY, reason="needs Caddy on PATH: apt-get install -y caddy (Debian's 2.6)"),
    pytest.mark.skipif(not shutil.which("redis-server"), reason="needs redis-server (apt-get install redis)"),
]
BACKGROUND_LEFT_OUT = "exclude=worker&exclude=sequencer&exclude=outbox"  # as deploy/Caddyfile probes
LOOPBACK = "127.0.0.1"
TICK_LIMIT = "3"  # READY_WORKER_TICK_MAX_SECONDS: the worker ticks every 0.2 s here


def self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1, signed by its own key (the browser is told to accept it)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(LOOPBACK))]), False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


def readiness(url: str, query: str = "") -> tuple[int, dict]:
    try:
        response = httpx.get(f"{url}/readyz" + (f"?{query}" if query else ""), timeout=10)
    except httpx.HTTPError as error:
        return 0, {"error": str(error)}
    return response.status_code, response.json()


class Deployment:
    """Caddy with TLS in front of two Daphnes and a worker (DEBUG off), on loopback."""

    def __init__(self, folder: Path, redis: PrivateRedis):
        self.folder, self.redis = folder, redis
        self.log_dir = folder / "logs"
        self.log_dir.mkdir()
        self.listeners = [listening_socket(), listening_socket()]
        self.daphne_urls = [url_of(listener) for listener in self.listeners]
        self.https_port = free_port()
        self.url = f"https://127.0.0.1:{self.https_port}"
        self.data_dir = folder / "data"
        self.processes: list[ServerProcess] = []
        self.worker: ServerProcess | None = None
        self.workers_started = 0
        self.secret_key, self.channels_prefix = secrets.token_urlsafe(40), f"deploy-{secrets.token_hex(4)}"

    def env(self) -> dict:
        """Production settings (DEBUG off) behind a proxy on this machine."""
        env = reviewer_env(
            url=self.url,
            database_url=database_url(),
            data_dir=self.data_dir,
            DEBUG="false",
            ALLOWED_HOSTS="127.0.0.1",
            TRUSTED_PROXIES="127.0.0.1/32",
            REDIS_URL=self.redis.url,
            CHANNELS_PREFIX=self.channels_prefix,
            READY_WORKER_TICK_MAX_SECONDS=TICK_LIMIT,
            METRICS_TOKEN="scrape-secret",
            EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend",
            OUTBOX_DIRECT_SEND="false",  # no agent listens
        )
        return {**env, "SECRET_KEY": self.secret_key}  # (reviewer_env drops the shell's)

    def caddy_env(self, cert: Path, key: Path) -> dict:
        home = self.folder / "caddy"
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "XDG_DATA_HOME": str(home / "data"),  # certificates and locks: here, never ~/.local
            "XDG_CONFIG_HOME": str(home / "config"),
            "CADDY_ADMIN": "off",
            "REVIEWER_SITE": self.url,
            "REVIEWER_HTTP_PORT": str(free_port()),
            "REVIEWER_HTTPS_PORT": str(self.https_port),
            "REVIEWER_BIND": "127.0.0.1",
            "REVIEWER_TLS": f"{cert} {key}",
            "REVIEWER_STATIC_ROOT": str(self.data_dir / "static"),
            "REVIEWER_UPSTREAMS": " ".join(url.removeprefix("http://") for url in self.daphne_urls),
            "REVIEWER_HEALTH_INTERVAL": "1s",
        }

    def start(self) -> "Deployment":
        keys.active_key()  # one key, made before any process could make its own
        env = self.env()
        collected = subprocess.run(
            [sys.executable, "manage.py", "collectstatic", "--noinput"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert collected.returncode == 0, collected.stderr
        cert, key = self_signed_certificate(self.folder)
        daphnes = []
        for number, listener in enumerate(self.listeners, start=1):
            process = daphne(
                f"daphne-{number}",
                listener,
                env=env,
                log_dir=self.log_dir,
                access_log=self.log_dir / f"daphne-{number}-access.log",
            )
            healthz = f"{url_of(listener)}/healthz"  # a page would redirect to https: DEBUG is off
            process.ready = (functools.partial(answers, healthz), "an answer to /healthz")
            daphnes.append(process)
        caddy = ServerProcess(
            "caddy",
            [str(CADDY), "run", "--config", str(REPO / "deploy" / "Caddyfile"), "--adapter", "caddyfile"],
            env=self.caddy_env(cert, key),
            log_dir=self.log_dir,
        )
        caddy.ready = (lambda: self.through_proxy("/healthz").status_code == 200, "/healthz over https")
        self.processes = [*daphnes, caddy]
        start_all([*self.processes, self.start_worker(wait=False)])
        return self

    def start_worker(self, *, wait: bool = True) -> ServerProcess:
        self.workers_started += 1
        self.worker = worker(
            f"worker-{self.workers_started}", env=self.env(), log_dir=self.log_dir, interval="0.2"
        )
        if wait:
            start_all([self.worker])
        return self.worker

    def through_proxy(self, path: str) -> httpx.Response:
        try:
            return httpx.get(self.url + path, verify=False, timeout=10)  # noqa: S501 (our own certificate)
        except httpx.HTTPError:
            return httpx.Response(599)

    def stop(self) -> None:
        for process in [*self.processes, self.worker]:
            if process is not None:
                process.stop()
        for listener in self.listeners:
            listener.close()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.log()}" for p in [*self.processes, self.worker] if p)


@pytest.fixture(scope="module")
def private_redis(tmp_path_factory):
    server = PrivateRedis(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def deployment(django_db_setup, django_db_blocker, tmp_path_factory, private_redis):
    running = Deployment(tmp_path_factory.mktemp("deployment"), private_redis)
    try:
        with django_db_blocker.unblock(), shared_signing_keys(tmp_path_factory):
            running.start()
        yield running
    finally:
        running.stop()
        sys.stdout.write(running.logs())  # shown by pytest only for a failing test


@pytest.fixture
def chromium_pages(deployment):
    """New pages on the deployment's https URL, each in a browser context of its own (one per person)."""
    from tests.browser.conftest import chromium_pages as pages_on

    with pages_on(deployment.url) as new_page:
        yield new_page


def names_the_stopped_worker(url: str) -> bool:
    return readiness(url) == (503, {"status": "unready", "failing": ["worker"]})


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_two_reviewers_decide_through_the_tls_proxy_and_see_each_other_live(
    deployment, chromium_pages, tenant, agent, requester, reviewer_a, reviewer_b
):
    from playwright.sync_api import expect

    from tests.browser.test_reviewing import live_section, sign_in, wait_until_live

    factories.make_policy(tenant, "refunds", thresholds=[{"group": "finance", "count": 2}], risk="high")
    proposal = factories.submit(agent, summary="Refund EUR 900.00 to order 77")
    alice, bob = chromium_pages(), chromium_pages()
    for page, person in ((alice, reviewer_a), (bob, reviewer_b)):
        sign_in(page, person)  # a secure session cookie and a CSRF check, both only over https
        page.goto(f"/proposals/{proposal.id}/")
        wait_until_live(page)  # the WebSocket, through Caddy, passed the same-origin check as wss
    assert alice.url.startswith(deployment.url)
    expect(live_section(bob)).to_contain_text("0 of 2")

    alice.get_by_label("One-time code").fill(factories.totp_code(reviewer_a))
    alice.get_by_role("button", name="Approve").click()
    expect(alice.get_by_text("Your approval is recorded.")).to_be_visible()
    expect(live_section(bob)).to_contain_text("Alice approved")
    expect(live_section(bob)).to_contain_text("1 of 2")

    # The page's css came from Caddy (collectstatic's output), not from a Daphne.
    stylesheet = alice.locator("link[rel=stylesheet]").first.get_attribute("href")
    assert stylesheet.startswith("/static/")
    served = deployment.through_proxy(stylesheet)
    assert served.status_code == 200 and "immutable" in served.headers["cache-control"]
    access = "".join((deployment.log_dir / f"daphne-{n}-access.log").read_text() for n in (1, 2))
    assert "/static/" not in access and "/proposals/" in access


@pytest.mark.django_db(transaction=True)
def test_the_proxy_passes_the_clients_address_and_https_and_nothing_a_client_forged(deployment):
    """Sign-in throttling counts the client Caddy saw (X-Forwarded-For), not Caddy's own address nor
    what the client claimed; the page is https to Django (X-Forwarded-Proto: HSTS is sent)."""
    from axes.models import AccessAttempt

    forged = {"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "http"}
    transport = httpx.HTTPTransport(local_address="127.0.0.3", verify=False)  # noqa: S501 (our certificate)
    with httpx.Client(base_url=deployment.url, transport=transport, headers=forged, timeout=10) as client:
        page = client.get("/accounts/login/")
        found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert found is not None
        token = found.group(1)
        posted = client.post(
            "/accounts/login/",
            data={"csrfmiddlewaretoken": token, "username": "nobody", "password": "wrong", "otp_token": ""},
            headers={"Origin": deployment.url, "Referer": deployment.url + "/accounts/login/"},
        )
    assert page.status_code == 200 and "strict-transport-security" in page.headers
    assert posted.status_code == 400, posted.text[:500]  # the form's refusal: CSRF held over https
    assert list(AccessAttempt.objects.values_list("ip_address", flat=True)) == ["127.0.0.3"]


@pytest.mark.django_db(transaction=True)
def test_readyz_turns_unready_when_the_worker_stops_and_ready_when_it_starts_again(deployment):
    everywhere = [*deployment.daphne_urls, deployment.url]

    def all_ready() -> bool:
        return all(
            (httpx.get(f"{url}/readyz", verify=False, timeout=10).status_code == 200)  # noqa: S501
            for url in everywhere
        )

    wait_until(all_ready, "every Daphne (and Caddy's answer) ready", timeout=30, detail=deployment.logs)
    assert 'reviewer_ready{check="worker"} 1.0' in scraped(deployment)

    deployment.worker.process.kill()  # by its PID, as a crash
    deployment.worker.process.wait(timeout=10)
    for url in deployment.daphne_urls:
        wait_until(
            functools.partial(names_the_stopped_worker, url),
            f"{url}/readyz names the stopped worker",
            timeout=30,
            detail=deployment.logs,
        )
        assert readiness(url, BACKGROUND_LEFT_OUT)[0] == 200  # what Caddy probes: still in the pool
    assert deployment.through_proxy("/accounts/login/").status_code == 200  # the site still serves
    assert worker_health(deployment.env()) == 1
    assert 'reviewer_ready{check="worker"} 0.0' in scraped(deployment)

    deployment.start_worker()
    wait_until(all_ready, "ready again once a worker ticks", timeout=30, detail=deployment.logs)
    assert worker_health(deployment.env()) == 0


def scraped(deployment: Deployment) -> str:
    """/metrics through Caddy, as Prometheus scrapes it (the gauges of whichever Daphne answers)."""
    response = httpx.get(
        f"{deployment.url}/metrics",
        headers={"Authorization": "Bearer scrape-secret"},
        verify=False,  # noqa: S501 (our own certificate)
        timeout=30,
    )
    assert response.status_code == 200, response.text[:500]
    return response.text


def worker_health(env: dict) -> int:
    """`manage.py worker_health --any` (the worker runs on this host anyway), its exit status."""
    return subprocess.run(
        [sys.executable, "manage.py", "worker_health", "--any"],
        cwd=REPO,
        env=env,
        capture_output=True,
        timeout=120,
    ).returncode


def plain_daphne(folder: Path, **extra: str) -> tuple[ServerProcess, str]:
    """One Daphne (DEBUG on, no worker) with `extra` settings; started, alive."""
    listener = listening_socket()
    url = url_of(listener)
    env = reviewer_env(url=url, database_url=extra.pop("DATABASE_URL", ""), data_dir=folder / "data", **extra)
    (folder / "logs").mkdir(exist_ok=True)
    process = daphne("daphne", listener, env=env, log_dir=folder / "logs")
    process.ready = (lambda: answers(f"{url}/healthz"), "an answer to /healthz")
    start_all([process])
    listener.close()  # Daphne holds its own copy
    return process, url


@pytest.mark.django_db(transaction=True)
def test_a_daphne_whose_redis_stops_is_alive_but_unready_naming_redis(tmp_path):
    redis = PrivateRedis(tmp_path / "redis").start()
    process, url = plain_daphne(tmp_path, DATABASE_URL=database_url(), REDIS_URL=redis.url)
    try:
        wait_until(lambda: readiness(url, BACKGROUND_LEFT_OUT)[0] == 200, "ready", detail=process.log)
        redis.kill()
        wait_until(
            lambda: readiness(url, BACKGROUND_LEFT_OUT) == (503, {"status": "unready", "failing": ["redis"]}),
            "/readyz names Redis",
            timeout=30,
            detail=process.log,
        )
        assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
        redis.start()  # the same port, as a restarted Redis
        wait_until(lambda: readiness(url, BACKGROUND_LEFT_OUT)[0] == 200, "ready again", timeout=30)
    finally:
        process.stop()
        redis.stop()


@pytest.mark.database_independent
def test_a_daphne_whose_database_does_not_answer_is_alive_but_unready_naming_the_database(tmp_path):
    nowhere = f"postgres://postgres@127.0.0.1:{free_port()}/reviewer"  # nothing listens there
    process, url = plain_daphne(
        tmp_path, DATABASE_URL=nowhere, DB_POOL_TIMEOUT="2", READY_CHECK_TIMEOUT_SECONDS="20"
    )
    try:
        assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
        assert readiness(url) == (503, {"status": "unready", "failing": ["database"]})
    finally:
        process.stop()
