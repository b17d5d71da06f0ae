"""In-process CPU and statements of the human-facing pages as the load test's reviewers use them (the
queue, one proposal's page, an approving vote through that page), with production settings (DEBUG off,
the cached template loader, WhiteNoise's manifest, a signing key from a folder) on a scratch PostgreSQL
database, through Django's test client. Not a module of bench/run.py: it prints, it returns no rows
(bench/README.md, "Performance: results and profiles").

    BENCH_DB_PREFIX=me_ N=40 [WAITING=100] [PROFILE=queue|detail|vote [TOP=40] [PROFILE_OUT=file]] \
        .venv/bin/python bench/profile_pages.py

The tenant has WAITING proposals waiting for the reviewer's group (finance, one approval, a step-up
window of 900 s as in bench/load/), each on an order of its own. "bare" is the baseline the load
test's report compares with: an agent's authenticated JSON GET of one proposal (`GET /api/v1/proposals/<id>`).

Each vote is on a fresh proposal (made outside the clock) and carries a fresh one-time code: the
device's last used step is set back outside the clock, so django-otp accepts the code as the first of
its step, as a reviewer's first vote after signing in ("vote, fresh code"); "vote, window" rides on the
session's step-up instead, as the load test's later votes do. A vote's clock includes the after-commit
work it hands to the background thread (CLOCK=process, the default; CLOCK=thread: the request's thread).
"""

import contextlib
import cProfile
import os
import pstats
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import POSTGRES  # noqa: E402 (after the path)
from bench.export_memory import _prepare_postgres, scratch_database  # noqa: E402

CLOCK = time.thread_time if os.environ.get("CLOCK") == "thread" else time.process_time
QUOTAS = (
    "AGENT_INTAKE_BURST",
    "AGENT_INTAKE_PER_MINUTE",
    "AGENT_OPEN_PROPOSALS",
    "TENANT_INTAKE_BURST",
    "TENANT_INTAKE_PER_MINUTE",
    "TENANT_OPEN_PROPOSALS",
)


def production_environment() -> dict:
    """bench/load/run.py's environment of a Daphne (DEBUG off), on a scratch database of our own."""
    url = f"{POSTGRES}/{scratch_database('reviewer_bench_pages')}"
    _prepare_postgres(url)
    folder = Path(tempfile.mkdtemp(prefix="reviewer-bench-pages-"))
    return {
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(40),
        "ALLOWED_HOSTS": "testserver,127.0.0.1,localhost",
        "DATABASE_URL": url,
        "REVIEWER_ISSUER": "http://127.0.0.1:8240",
        "REVIEWER_DATA_DIR": str(folder),
        "REVIEWER_SIGNING_KEY_DIR": str(folder / "keys"),
        "AUDIT_CHECKPOINT_DIR": str(folder / "checkpoints"),
        "EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend",
        "SECURE_SSL_REDIRECT": "false",
        "SESSION_COOKIE_SECURE": "false",
        "CSRF_COOKIE_SECURE": "false",
        "LOG_LEVEL": "WARNING",
        **{name: "1000000000" for name in QUOTAS},
    }


def setup(environment: dict) -> None:
    os.environ.update(environment)
    for name in ("REDIS_URL", "REVIEWER_SIGNING_KEY", "REVIEWER_SIGNING_KEY_FILE", "SECRET_KEY_FILE"):
        os.environ.pop(name, None)
    os.environ["DJANGO_SETTINGS_MODULE"] = "reviewer.settings"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    # DEBUG is off: the pages' {% static %} reads WhiteNoise's manifest, and the first key is made by hand.
    subprocess.run(  # noqa: S603 (our own interpreter and manage.py)
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"], cwd=ROOT, check=True
    )
    call_command("rotate_signing_key", verbosity=0)


class Pages:
    """The load test's world on the scratch database: a tenant, its requester and finance reviewers, the
    policy, an agent and `waiting` proposals waiting for the reviewer (each on an order of its own); the
    reviewer's signed-in, verified test client; and what is measured, each returning its CPU seconds."""

    def __init__(self, waiting: int):
        from django.test import Client
        from django_otp.plugins.otp_totp.models import TOTPDevice

        from tests import factories

        tenant = factories.make_tenant()
        factories.make_user("requester", tenant=tenant, principal_id="requester", groups=["sales"])
        self.reviewer = factories.make_user("reviewer", tenant=tenant, groups=["finance"], first_name="Rey")
        for number in range(3):  # colleagues in the group, as in a tenant
            factories.make_user(f"finance-{number}", tenant=tenant, groups=["finance"])
        factories.make_policy(
            tenant,
            "large-refunds",
            tool_pattern="payments.refund",
            thresholds=[{"group": "finance", "count": 1}],
            step_up="900",
        )
        self.agent = factories.make_agent(tenant, slug="refund-agent", card_url="")
        self.orders = iter(range(10**9))
        self.proposals = [self.waiting() for _ in range(waiting)]
        self.device = TOTPDevice.objects.get(user=self.reviewer)
        self.client = factories.verified_client(self.reviewer)
        self.agent_client = Client(HTTP_AUTHORIZATION="Bearer api-secret")  # make_agent's default token

    def waiting(self):
        from tests import factories

        action = factories.refund_action(order_id=str(next(self.orders)), amount="250.00")
        return factories.submit(self.agent, action=action)

    @staticmethod
    def settled() -> float:
        """The clock, once the after-commit thread has run what was handed to it (CLOCK=process)."""
        from lib.commit_hooks import wait_for_background_hooks

        if CLOCK is time.process_time:
            wait_for_background_hooks()
        return CLOCK()

    def fetch(self, url: str, client=None) -> float:
        started = self.settled()
        response = (client or self.client).get(url)
        assert response.status_code == 200, response.status_code
        return self.settled() - started

    def vote(self, fresh_code: bool, captured=None) -> float:
        """One approving vote through the page's form on a new proposal (made outside the clock; its
        statements are not in `captured` either). `fresh_code`: with a one-time code, the device's last
        used step set back first (outside the clock); else on the session's step-up window."""
        from django_otp.plugins.otp_totp.models import TOTPDevice

        from tests import factories

        proposal = self.waiting()  # replaces the one voted on: the queue keeps its size
        code = ""
        if fresh_code:
            TOTPDevice.objects.filter(pk=self.device.pk).update(last_t=-1)
            self.device.refresh_from_db()
            code = factories.code_of(self.device)
        form = {"action": "approve", "digest": proposal.action_digest, "reason": "", "otp_code": code}
        started = self.settled()
        with captured if captured is not None else contextlib.nullcontext():
            response = self.client.post(f"/proposals/{proposal.id}/decide", form)
            took = self.settled() - started
        assert response.status_code == 302, (response.status_code, response.content[-3000:])
        return took

    def measures(self) -> dict:
        detail_url = f"/proposals/{self.proposals[0].id}/"
        return {
            "queue": lambda: self.fetch("/"),
            "detail": lambda: self.fetch(detail_url),
            "vote, fresh code": lambda: self.vote(True),
            "vote, window": lambda: self.vote(False),
            "bare": lambda: self.fetch(f"/api/v1/proposals/{self.proposals[0].id}", self.agent_client),
        }


def main() -> None:
    setup(production_environment())
    from django.conf import settings
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    assert not settings.DEBUG
    pages = Pages(int(os.environ.get("WAITING", "100")))
    measures = pages.measures()
    if os.environ.get("ONLY"):  # one of them alone (for a sampling profiler such as py-spy)
        measures = {os.environ["ONLY"]: measures[os.environ["ONLY"]]}
    for _ in range(5):  # warm-up: templates compiled and cached, connections open
        for measure in measures.values():
            measure()
    runs = int(os.environ.get("N", "40"))
    samples: dict[str, list[float]] = {name: [] for name in measures}
    for _ in range(runs):  # in turns, so the machine's other load falls on all of them alike
        for name, measure in measures.items():
            samples[name].append(measure())
    for name, values in samples.items():
        values.sort()
        print(
            f"{name:18} CPU ms ({CLOCK.__name__}): min {values[0] * 1000:5.1f}"
            f"  p25 {values[len(values) // 4] * 1000:5.1f}  median {statistics.median(values) * 1000:5.1f}"
            f"  p90 {values[int(len(values) * 0.9)] * 1000:5.1f}"
        )

    def statements(name: str) -> list[dict]:
        captured = CaptureQueriesContext(connection)
        if name.startswith("vote"):
            pages.vote(name == "vote, fresh code", captured)
        else:
            with captured:
                measures[name]()
        return captured.captured_queries

    counted = {name: statements(name) for name in measures}
    print("statements:", {name: len(queries) for name, queries in counted.items()})
    if os.environ.get("SHOW_SQL"):  # every statement of one request of each, cut at SHOW_SQL characters
        for name, queries in counted.items():
            print(f"== {name}: {len(queries)} statements")
            for query in queries:
                print("  ", query["sql"][: int(os.environ["SHOW_SQL"])])

    profiled = os.environ.get("PROFILE")
    if profiled:
        measure = measures[profiled]
        profile = cProfile.Profile(CLOCK)
        profile.enable()
        for _ in range(runs):
            measure()
        profile.disable()
        if os.environ.get("PROFILE_OUT"):  # for pstats' other views (callers, callees)
            profile.dump_stats(os.environ["PROFILE_OUT"])
        stats = pstats.Stats(profile)
        stats.sort_stats("cumulative").print_stats(int(os.environ.get("TOP", "40")))
        stats.sort_stats("tottime").print_stats(int(os.environ.get("TOP", "40")))
    print("load average", os.getloadavg())


if __name__ == "__main__":
    main()
