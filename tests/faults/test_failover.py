"""PostgreSQL fails over under traffic: a primary and a streaming standby of our own on loopback
(tests/faults/servers.py), the standby synchronous (`synchronous_standby_names`), Reviewer under Daphne
and its worker on a multi-host DATABASE_URL (`target_session_attrs=read-write`), the demo refund agent
refunding through the fake payments service (the ledger of effects).

Proposals are approved while others are delivered, consumed and refunded; then the primary dies
(immediate shutdown) with votes just committed and deliveries in flight, and the standby is promoted.
Nobody restarts or reconfigures a Reviewer process: their next connections find the new primary. What
synchronous replication promises is what is checked: every vote whose commit returned before the
crash has its decision on the new primary; every proposal settles; each decision is delivered once and
refunded at most once, under its own id; the audit chain verifies against its checkpoint files (the
sequencer's asynchronous seals and the UNLOGGED pending rows a promoted standby starts without are put
back by the sequencer: docs/operations.md, "PostgreSQL failover").
"""

import shutil
import time
from contextlib import ExitStack

import pytest
from django.core.management import call_command
from django.db import connection

from approvals.models import Decision
from approvals.states import State
from examples.downstream import FakePaymentsServer
from tests import factories
from tests.e2e.test_gate_holds import Reviewer
from tests.faults.conftest import default_database
from tests.faults.servers import PrivatePostgres
from tests.faults.stack import FaultStack
from tests.faults.test_processes_die import (
    SETTLE_SECONDS,
    Run,
    ask,
    check_nothing_lost_or_doubled,
    unsettled,
    unsettled_detail,
    vote_here,
)
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.database_independent]  # its own servers

BEFORE, ACROSS, AFTER = 2, 4, 2  # proposals settled before the failover, voted just before it, after it


def test_a_standby_promoted_under_traffic_loses_no_committed_vote_and_doubles_nothing(
    fault_folder, private_redis, django_db_blocker, settings, tmp_path
):
    primary = PrivatePostgres(fault_folder / "primary").init().start()
    primary.create_database("reviewer")
    standby = primary.streaming_standby(fault_folder / "standby").start()
    primary.require_synchronous_standby()
    hosts = f"127.0.0.1:{primary.port},127.0.0.1:{standby.port}"
    database_url = f"postgres://postgres@{hosts}/reviewer?target_session_attrs=read-write&connect_timeout=3"
    payments = FakePaymentsServer().start()
    stack = FaultStack(
        fault_folder / "stack",
        database_url=database_url,
        redis_url=private_redis.url,
        downstream_url=payments.url,
    )
    settings.AUDIT_CHECKPOINT_DIR = stack.checkpoint_dir
    settings.REVIEWER_ISSUER = stack.url
    page = None
    with ExitStack() as cleanup, django_db_blocker.unblock():
        cleanup.callback(standby.stop)
        cleanup.callback(primary.stop)
        cleanup.callback(payments.stop)
        cleanup.enter_context(default_database(database_url))  # this process follows the failover too
        call_command("migrate", verbosity=0)
        tenant = factories.make_tenant()
        factories.make_user("requester", tenant=tenant, principal_id="requester", groups=["finance"])
        reviewer = factories.make_user("reviewer_a", tenant=tenant, groups=["finance"])
        factories.make_policy(
            tenant,
            "refunds",
            tool_pattern="payments.refund",
            thresholds=[{"group": "finance", "count": 1}],
            step_up="3600",
        )
        factories.make_agent(
            tenant, push_token=stack.push_token, api_token=stack.api_token, card_url=stack.agent.audience
        )
        try:
            stack.start()
            page = Reviewer(stack, reviewer)  # signs in: its code opens the step-up window of the votes
            run = Run(stack, primary, private_redis, payments, reviewer, page)
            settled = [ask(run, number) for number in range(BEFORE)]
            for proposal in settled:
                vote_here(run, proposal)
            run.wait(
                lambda: not unsettled(run, settled), "the first proposals to settle", timeout=SETTLE_SECONDS
            )

            across = [ask(run, BEFORE + number) for number in range(ACROSS)]
            for proposal in across:
                vote_here(run, proposal)  # its commit returned: the standby has it (synchronous)
            connection.close()
            crashed = time.monotonic()
            primary.crash()  # with the continuations, consumes and refunds of `across` in flight
            standby.promote()
            promoted = time.monotonic() - crashed

            after = [ask(run, BEFORE + ACROSS + number) for number in range(AFTER)]
            for proposal in after:
                vote_here(run, proposal)
            proposals = settled + across + after
            assert Decision.objects.filter(proposal__in=across).count() == ACROSS  # no committed vote lost
            wait_until(
                lambda: not unsettled(run, proposals),
                "every proposal to settle on the new primary",
                timeout=SETTLE_SECONDS,
                interval=0.5,
                detail=lambda: unsettled_detail(run, proposals) + "\n" + stack.logs(),
            )
            settled_after = time.monotonic() - crashed
            outcomes = check_nothing_lost_or_doubled(run, tenant, proposals)
            assert outcomes[State.SUCCEEDED] >= BEFORE  # the agent acts on the new primary too
            print(  # shown with -s or -rP
                f"failover: promoted {promoted:.1f} s after the crash; all {len(proposals)} settled "
                f"{settled_after:.0f} s after it; outcomes {dict(outcomes)}"
            )
        finally:
            if page is not None:
                page.close()
            stack.stop()
            print(stack.logs())  # shown by pytest only when the test fails
            print(f"--- primary\n{primary.log()}\n--- standby\n{standby.log()}")
            shutil.copytree(stack.folder, tmp_path / "stack", ignore=shutil.ignore_patterns("*.sqlite3*"))
