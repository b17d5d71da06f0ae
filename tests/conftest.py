"""Shared fixtures: named personas in one tenant, an outsider in another, and a throwaway signing key.

Personas (tenant "acme"): requester (the principal agents act for), reviewer_a and reviewer_b
(finance), reviewer_c (ops), admin (tenant admin, in the admins group), compliance (reads, never votes);
outsider belongs to tenant "globex".
"""

import os

import pytest
from django.conf import settings as django_settings
from django.db import connection

from approvals.a2a.client import forget_cards
from tenants.models import TenantMembership
from tests import factories
from tests.audit.pg_flush import let_the_test_flush_through_audit_triggers


@pytest.fixture(autouse=True)
def _signing_keys(request, tmp_path_factory, settings):
    """Every test run signs with its own key in a temporary folder, never the developer's data/ key."""
    key_dir = tmp_path_factory.getbasetemp() / "signing-keys"
    settings.SIGNING_KEY_DIR = key_dir
    settings.SIGNING_KEY_PEM = ""
    settings.SIGNING_KEY_AUTOGENERATE = True
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    # Persona passwords are test data: a fast hasher keeps fixtures cheap (PBKDF2 costs ~0.3 s each).
    # Not for tests whose servers run in other processes: those check passwords with the real hashers.
    if not (request.node.get_closest_marker("e2e") or request.node.get_closest_marker("browser")):
        settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    return key_dir


@pytest.fixture(autouse=True)
def _audit_checkpoint_dir(settings, tmp_path):
    """Each test writes the audit checkpoint files (kept outside the database) in its own folder: a
    file left by another test's database would contradict this one's chains."""
    settings.AUDIT_CHECKPOINT_DIR = tmp_path / "audit-checkpoints"


@pytest.fixture(autouse=True)
def _worker_delivers(settings):
    """In this process, committed continuations wake the worker instead of being sent from here
    (approvals/worker/delivery.py), so a test that runs the worker sees what it delivers. Tests of the direct
    send turn it on; servers started as processes (tests/e2e) send directly, as deployed."""
    settings.OUTBOX_DIRECT_SEND = False
    # After-commit work runs in the committing thread, so a test reads the chained trail and gets its
    # broadcasts when the call returns; tests of the background thread turn it on.
    settings.COMMIT_HOOKS_IN_BACKGROUND = False
    # The appending process chains its own events, so the trail is chained when a service call returns
    # (on PostgreSQL the default is the worker's sequencer); tests of the worker's sequencer turn it on.
    settings.AUDIT_SEQUENCING = "after_commit"


@pytest.fixture
def tenant(db):
    return factories.make_tenant()


@pytest.fixture
def other_tenant(db):
    return factories.make_tenant(slug="globex", name="Globex")


@pytest.fixture
def requester(tenant):
    return factories.make_user("requester", tenant=tenant, principal_id="requester", groups=["finance"])


@pytest.fixture
def reviewer_a(tenant):
    return factories.make_user("reviewer_a", tenant=tenant, groups=["finance"], first_name="Alice")


@pytest.fixture
def reviewer_b(tenant):
    return factories.make_user("reviewer_b", tenant=tenant, groups=["finance"], first_name="Bob")


@pytest.fixture
def reviewer_c(tenant):
    return factories.make_user("reviewer_c", tenant=tenant, groups=["ops"], first_name="Carol")


@pytest.fixture
def admin_user(tenant):
    return factories.make_user("admin", tenant=tenant, role=TenantMembership.Role.ADMIN, groups=["admins"])


@pytest.fixture
def compliance(tenant):
    return factories.make_user("compliance", tenant=tenant, role=TenantMembership.Role.COMPLIANCE)


@pytest.fixture
def outsider(other_tenant):
    return factories.make_user("outsider", tenant=other_tenant, groups=["finance"])


@pytest.fixture
def agent(tenant):
    return factories.make_agent(tenant)


@pytest.fixture
def refund_policy(tenant):
    """Refunds need one finance approval with a fresh code per vote."""
    return factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 1}]
    )


def pytest_configure(config):
    """Under pytest-xdist each worker has its own test database, so its ids repeat the other's: a
    channel-layer prefix of its own (here and in the servers it starts, which inherit the environment)
    keeps one worker's events out of the other's groups on a shared Redis."""
    let_the_test_flush_through_audit_triggers()  # tests/audit/pg_flush.py
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    layer = django_settings.CHANNEL_LAYERS["default"]
    if worker and "redis" in layer["BACKEND"]:
        prefix = f"{layer['CONFIG']['prefix']}-{worker}"
        os.environ["CHANNELS_PREFIX"] = prefix
        layer["CONFIG"]["prefix"] = prefix


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's, and on PostgreSQL the other sessions on the test database ended before its
    teardown drops it. Connections that other threads of this process opened stay open after their tests
    (nothing closes them), and PostgreSQL refuses to drop a database in use ("being accessed by other
    users"): each xdist worker's database was left behind, with a warning."""
    yield
    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


# What a test asks for to reach the suite's test database (pytest-django refuses every other access).
_DATABASE_FIXTURES = {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback"}


def pytest_collection_modifyitems(config, items):
    """A test marked `database_independent` is run by CI on the PostgreSQL pass only (.ci/run): it must
    not reach the suite's database, which is what the SQLite pass would test differently. pytest-django
    blocks the database for a test that asks for none of its fixtures (tests/faults unblocks it only to
    point Django at its private PostgreSQL), so a marked test asking for one is refused here."""
    for item in items:
        if item.get_closest_marker("database_independent") is None:
            continue
        if item.get_closest_marker("django_db") or _DATABASE_FIXTURES & set(item.fixturenames):
            raise pytest.UsageError(f"{item.nodeid} is marked database_independent but uses the database")
    items[:] = longest_modules_first(items)


def longest_modules_first(items: list) -> list:
    """The modules in the order pytest-xdist should hand them out (`make pytest` passes
    --no-loadscope-reorder, which keeps this order): the fault loop (`slow`, minutes on its own) first,
    then the modules that start servers (`e2e`, `browser`), then the rest, each group by its number of
    tests, most first. A worker takes the next module when it is done with one, so the long ones start
    at once and the short ones fill in at the end: both workers finish together, instead of the fault
    loop (one test, and last in xdist's own most-tests-first order) starting when the rest is done.
    The tests of a module stay together and in their order."""
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)

    def weight(tests: list) -> tuple[int, int]:
        if any(test.get_closest_marker("slow") for test in tests):
            return (0, -len(tests))
        if any(test.get_closest_marker("e2e") or test.get_closest_marker("browser") for test in tests):
            return (1, -len(tests))
        return (2, -len(tests))

    ordered = sorted(modules.values(), key=weight)  # stable: equal weights keep the collection order
    return [test for tests in ordered for test in tests]


def pytest_report_header(config):
    database = django_settings.DATABASES["default"]
    return f"database: {database['ENGINE']} {database['NAME']}"


@pytest.fixture
def fake_agent(settings):
    """A real A2A agent server on loopback (tests/approvals/fake_agent.py), allowed as an outbound host."""
    from tests.approvals.fake_agent import FakeAgent

    settings.AGENT_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]  # the agent is on loopback
    agent = FakeAgent().start()
    forget_cards()
    yield agent
    agent.stop()
    forget_cards()
