"""Real Chromium (Debian's package, never a downloaded one) against the real ASGI app served by Daphne.

Daphne runs in its own process on a loopback socket that this process opens and hands over (no port
race). It must see what the tests write, so the tests are transactional and Daphne uses the test
database: PostgreSQL's test database by name, or on SQLite a file (an in-memory test database cannot
be shared, so this conftest asks for a file before the database is created). Events published by this
process (a proposal submitted here) reach Daphne's sockets only through a shared channel layer, i.e.
with REDIS_URL; both processes then use one fresh prefix of their own.
"""

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connections

from tests.examples.harness import stop_process
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "test-output"
SCREENSHOTS = OUTPUT / "screenshots"
CHROMIUM = shutil.which("chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
CHANNELS_PREFIX = f"browser-{secrets.token_hex(4)}"
STARTUP_SECONDS = 30


def pytest_collection_finish(session):
    """Before any database exists: a file for the SQLite test database when browser tests will run."""
    if not CHROMIUM or not any(item.get_closest_marker("browser") for item in session.items):
        return
    database = connections["default"].settings_dict
    if database["ENGINE"].endswith("sqlite3") and not (database.get("TEST") or {}).get("NAME"):
        folder = tempfile.mkdtemp(prefix="reviewer-browser-")
        database.setdefault("TEST", {})["NAME"] = str(Path(folder) / "test.sqlite3")
        session.config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


def pytest_collection_modifyitems(config, items):
    if CHROMIUM:
        return
    skip = pytest.mark.skip(reason="browser tests need Debian's chromium: apt-get install -y chromium")
    for item in items:
        if item.get_closest_marker("browser"):
            item.add_marker(skip)


def _database_url() -> str:
    database = connections["default"].settings_dict
    if database["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{database['NAME']}"
    credentials = database["USER"] + (f":{database['PASSWORD']}" if database["PASSWORD"] else "")
    host, port = database["HOST"] or "127.0.0.1", database["PORT"] or 5432
    return f"postgres://{credentials}@{host}:{port}/{database['NAME']}"


def _first_answer(url: str, process: subprocess.Popen, log: Path) -> None:
    """The listening socket exists before Daphne starts, so this request waits in its backlog until Daphne
    answers it: no polling. A Daphne that dies closes the socket and the request fails at once."""
    try:
        with urllib.request.urlopen(url, timeout=STARTUP_SECONDS) as response:  # noqa: S310 (our loopback server)
            if response.status == 200:
                return
    except OSError as error:
        raise RuntimeError(
            f"Daphne did not answer {url} ({error}); exit code {process.poll()}:\n{log.read_text()[-3000:]}"
        ) from error
    raise RuntimeError(f"Daphne answered {url} with {response.status}:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")  # stopped after the module, before other tests' servers start
def live_server_url(django_db_setup, django_db_blocker, tmp_path_factory):
    """Daphne serving tests/browser/asgi.py (reviewer.asgi + static files) on the test database."""
    with daphne_server(tmp_path_factory) as url:
        yield url


@pytest.fixture(autouse=True)
def _chained_before_the_flush(request):
    """A browser test ends when the page shows what it waited for, while Daphne may still be chaining
    the audit events of the last change on its after-commit thread. Such a transaction running into the
    flush's TRUNCATE of every table is the likely cause of a deadlock seen once on PostgreSQL (the
    flush failed, and the next test found the last one's rows). So the teardown waits until nothing is
    left to chain, before the flush."""
    if (
        request.node.get_closest_marker("browser") is None
        or request.node.get_closest_marker("django_db") is None
    ):
        yield  # not a browser test, or one on servers of its own that never uses the suite's database
        return
    request.getfixturevalue("transactional_db")  # set up first, so flushed after this teardown
    yield
    from audit.models import AuditPending

    chained = "Daphne chained the test's audit events"
    wait_until(lambda: not AuditPending.objects.exists(), chained, timeout=30)


@contextmanager
def daphne_server(tmp_path_factory, **extra_env: str):
    """Start Daphne (with `extra_env`, e.g. another REDIS_URL), yield its URL, stop it by its PID."""
    if not CHROMIUM:
        pytest.skip("browser tests need Debian's chromium: apt-get install -y chromium")
    OUTPUT.mkdir(exist_ok=True)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    data_dir = tmp_path_factory.mktemp("daphne-data")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "reviewer.settings",
        "DATABASE_URL": _database_url(),
        "SECRET_KEY": secrets.token_urlsafe(40),
        "REVIEWER_DATA_DIR": str(data_dir),
        "REVIEWER_SIGNING_KEY_DIR": str(tmp_path_factory.getbasetemp() / "signing-keys"),
        "REVIEWER_ISSUER": f"http://127.0.0.1:{port}",
        "EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend",
        "CHANNELS_PREFIX": CHANNELS_PREFIX,
        "PYTHONPATH": str(ROOT),
        # No worker runs beside this Daphne, so it chains its own audit events (as the test process
        # does): the audit pages the tests read list only chained events.
        "AUDIT_SEQUENCING": "after_commit",
        # Nor does it send continuations (no agent listens): a send failing after the test ended would
        # write in the middle of the next test's flush.
        "OUTBOX_DIRECT_SEND": "false",
        **extra_env,
    }
    log = OUTPUT / "daphne.log"
    with open(log, "w") as log_file:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daphne",
                "--fd",
                str(listener.fileno()),
                "tests.browser.asgi:application",
            ],
            cwd=ROOT,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            pass_fds=[listener.fileno()],
        )
    listener.close()  # Daphne holds its own copy of the listening socket
    url = f"http://127.0.0.1:{port}"
    try:
        _first_answer(url + "/accounts/login/", process, log)
        yield url
    finally:
        stop_process(process)


@pytest.fixture(autouse=True)
def _shared_channel_layer(settings):
    """This process publishes with Daphne's prefix, so Redis carries its events to Daphne's sockets."""
    layer = settings.CHANNEL_LAYERS["default"]
    if "redis" in layer["BACKEND"]:
        settings.CHANNEL_LAYERS = {
            "default": {**layer, "CONFIG": {**layer["CONFIG"], "prefix": CHANNELS_PREFIX}}
        }


@pytest.fixture(scope="module")
def browser(live_server_url):
    """Headless Chromium for one test module. Playwright's sync API keeps an event loop running in this
    thread while it is started, which Django's async-safety check takes for async code calling the ORM:
    the check is off for exactly that time (and the loop stops before the next module's tests)."""
    from playwright.sync_api import sync_playwright

    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    playwright = sync_playwright().start()
    try:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
    finally:
        playwright.stop()
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def new_page(browser, live_server_url):
    """Pages in fresh browser contexts (one per person: separate cookies), closed after the test."""
    from playwright.sync_api import expect

    expect.set_options(timeout=10_000)
    contexts = []

    def make(width=1280, height=900, **options):
        """`options` are Playwright's context options, e.g. is_mobile=True, has_touch=True for a phone."""
        context = browser.new_context(
            base_url=live_server_url, viewport={"width": width, "height": height}, **options
        )
        contexts.append(context)
        return context.new_page()

    yield make
    for context in contexts:
        context.close()


@contextmanager
def chromium_pages(base_url: str):
    """For tests that run servers of their own (over TLS with their own certificate, which is accepted):
    a function making new pages on `base_url`, each in a browser context of its own (one per person).
    Playwright's loop runs in this thread while they are open, which Django's async-safety check would
    take for async code calling the ORM: off meanwhile."""
    if not CHROMIUM:
        pytest.skip("browser tests need Debian's chromium: apt-get install -y chromium")
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=15_000)
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    playwright = sync_playwright().start()
    chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)

    def new_page():
        return chromium.new_context(base_url=base_url, ignore_https_errors=True).new_page()

    try:
        yield new_page
    finally:
        chromium.close()
        playwright.stop()
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


def screenshot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def beside_the_browser(function, *args, **kwargs):
    """Run a service call in another thread. Playwright's event loop runs in this one, and a service's
    on-commit broadcast (async_to_sync) cannot run in a thread with a running loop."""

    def call():
        try:
            return function(*args, **kwargs)
        finally:
            connections.close_all()  # this thread's connection would otherwise outlive the test database

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(call).result()


def needs_shared_channel_layer():
    if "redis" not in django_settings.CHANNEL_LAYERS["default"]["BACKEND"]:
        pytest.skip(
            "needs REDIS_URL: an event published by the test process reaches Daphne's sockets only "
            "through a shared channel layer"
        )


class Steps:
    """Numbered screenshots of one test's walk, in a folder named after the test (an earlier run's
    shots removed first, so the folder shows this run's walk only)."""

    def __init__(self, request):
        self.folder = SCREENSHOTS / request.node.name
        self.folder.mkdir(parents=True, exist_ok=True)
        for old in self.folder.glob("*.png"):
            old.unlink()
        self.number = 0

    def shot(self, page, step: str) -> None:
        self.number += 1
        page.screenshot(path=str(self.folder / f"{self.number:02d}-{step}.png"), full_page=True)


@pytest.fixture
def steps(request):
    return Steps(request)
