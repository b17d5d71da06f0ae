"""R1r, R7 and their A2A twins R1rc, R7c: a REST agent's policy-allowed call, as an agent pays it, against
a bare authenticated API round trip to the same Daphne.

The call is what reviewer-gate's `ReviewerClient` and `Approval.report` send: submit (`POST
/api/v1/proposals` with `Prefer: decision-in-answer, consume`; policy allows, so the signed decision is
in the intake answer, already consumed for the agent) → verify (reviewer-gate's `Gate`: signature,
binding, single use) → the outcome report (`POST /api/v1/decisions/<jti>/outcome`, `{"status":
"succeeded", "transaction_id": …}`): two requests. With BENCH_CONSUME_AT_INTAKE=0 the agent asks
without `consume` and sends the consume (`POST /api/v1/decisions/<jti>/consume`) between verify and
outcome, as the load test's agent and agents on an earlier reviewer-gate do: three requests. Baseline:
`GET /api/v1/proposals/<id>` with the same agent's token (authentication, one read, JSON).

- **R1r** (latency): a pull agent (no card URL: no continuation, no outbox row). Target p50 ≤ 3x.
- **R1rc**: the same call from an agent registered with a card URL (an A2A agent), whose allowed
  decision costs intake its continuation's outbox row. Same target.
- **R7** (capacity): the pull agent's allowed calls per second from 8 concurrent clients (threads,
  kept-alive connections) against bare requests per second at 8. Target ≥ 0.33x: one allowed call
  should cost Reviewer no more than about three bare requests.
- **R7c**: R7 with the A2A agent. Same target.

The A2A agent's continuation is held, not sent, as in production for an agent that takes the decision
from the answer: intake queues it due ANSWERED_CONTINUATION_DELAY_SECONDS later (10 s), and the worker,
once it is due, finds the decision consumed and records it delivered without sending it
(approvals/worker/delivery.py). So nothing needs to answer at the agent's card URL, which names a
loopback port nothing listens on: a continuation sent by mistake would fail there and be retried, and
the row's note counts such attempts (0 expected) rather than letting a stub's answers hide them. The
worker's records of those held continuations come 10 s after their calls: R7c waits (untimed) after
each of its phases until every row is settled, so that work falls on no other phase, and the note gives
the worker's CPU per call over those phases and their settling (the audit chaining included). In
R1r's and R1rc's turns the records come during later turns, on every kind alike.

On a scratch PostgreSQL database, one Daphne (bench/settings.py), one allow policy, REVIEWERS (5)
reviewers in the tenant (none with a page open, as for most allowed calls), and one `run_worker` beside
it, as deployed (AUDIT_SEQUENCING = "worker", the default on PostgreSQL: it chains the audit events the
Daphne accepts). R1r and R1rc: one bare request, one pull call, one A2A call in turns, CALLS times per
round; R7's phases (bare, pull, A2A) follow each other in each round, in an order turned by one each
round, so the machine's other load falls on all alike. Each row's note gives its ratio in each of the
ROUNDS rounds. COMMIT_HOOKS_IN_BACKGROUND in the environment reaches the Daphne (false: the after-commit
work runs before the answer, as before it had a thread).

`Agent` is shared with R11 (bench/r11_traces.py), whose call stays submit → verify → consume
(`report=False`, its default here).
"""

import os
import threading
import time
import uuid
from collections import Counter

import httpx

from bench.common import (
    ms,
    percentile,
    refund_request,
    scratch_environment,
    setup_django,
    spread,
    start_worker,
    stop_process,
)
from bench.r3_intake_http import free_port, start_daphne

CLIENTS = 8
CALLS = int(os.environ.get("BENCH_R1R_CALLS", "40"))  # per round, one agent
PHASE_SECONDS = float(os.environ.get("BENCH_PHASE_SECONDS", "8"))
ROUNDS = 3
API_TOKEN = "bench-api-token"  # noqa: S105 (a scratch agent's token on a scratch database)
A2A_API_TOKEN = "bench-a2a-api-token"  # noqa: S105 (the same, for the agent with a card URL)
REVIEWERS = int(os.environ.get("BENCH_R7_REVIEWERS", "5"))  # a tenant of agents has people too
KINDS = ("bare", "pull", "a2a")
# The agent asks intake to consume (Prefer: consume), as reviewer-gate's request_approval does.
CONSUME_AT_INTAKE = os.environ.get("BENCH_CONSUME_AT_INTAKE", "1") != "0"


class Agent:
    """One REST agent: its kept-alive connection and the gate it verifies with."""

    def __init__(self, base: str, gate, token: str = API_TOKEN):
        self.http = httpx.Client(
            base_url=base,
            # As reviewer-gate's ReviewerClient.submit: it acts on a decision made at intake.
            headers={"Authorization": f"Bearer {token}", "Prefer": "decision-in-answer"},
            timeout=30,
        )
        self.gate = gate
        self.refused: Counter = Counter()  # a failed call's step and HTTP status

    def bare(self, proposal_id: str) -> bool:
        return self.http.get(f"/api/v1/proposals/{proposal_id}").status_code == 200

    def allowed_call(self, report: bool = False) -> bool:
        """submit → verify → consume, and with `report` the outcome, as `Approval.report` sends it. With
        `report` (the whole call, as reviewer-gate makes it) and CONSUME_AT_INTAKE, the submit asks
        intake to consume, and the consume request is left out when it did."""
        request = refund_request()
        task_id = f"task-{uuid.uuid4()}"
        at_intake = report and CONSUME_AT_INTAKE
        answer = self.http.post(
            "/api/v1/proposals",
            json={"task_id": task_id, "request": request},
            headers={"Prefer": "decision-in-answer, consume"} if at_intake else None,
        )
        if answer.status_code != 201 or not answer.json().get("token"):
            self.refused[f"submit {answer.status_code}"] += 1
            return False
        decision = self.gate.verify(
            answer.json()["token"],
            task_id=task_id,
            request_id=request["request_id"],
            action_digest=request["action_digest"],
        )
        consumed_at_intake = at_intake and "consume" in answer.headers.get("Preference-Applied", "")
        if not consumed_at_intake:  # else: verified above, acted on now
            consumed = self.http.post(f"/api/v1/decisions/{decision.jti}/consume", json={"rev": decision.rev})
            if consumed.status_code != 200:
                self.refused[f"consume {consumed.status_code}"] += 1
                return False
        if not report:
            return True
        # The refund happened here; then what every agent built on reviewer-gate sends.
        reported = self.http.post(
            f"/api/v1/decisions/{decision.jti}/outcome",
            json={"status": "succeeded", "transaction_id": f"tx-{decision.jti}"},
        )
        if not reported.is_success:
            self.refused[f"outcome {reported.status_code}"] += 1
        return reported.is_success


def interleaved(pull: Agent, a2a: Agent, proposal_id: str, turn: int) -> dict[str, list[float]]:
    """One bare request, one pull call and one A2A call in turns (starting at `turn`), CALLS times: a
    swing of the machine's load falls on every side of the ratios."""
    calls = {
        "bare": lambda: pull.bare(proposal_id),
        "pull": lambda: pull.allowed_call(report=True),
        "a2a": lambda: a2a.allowed_call(report=True),
    }
    samples: dict[str, list[float]] = {kind: [] for kind in KINDS}
    order = KINDS[turn % 3 :] + KINDS[: turn % 3]
    for _ in range(CALLS):
        for kind in order:
            started = time.perf_counter()
            if not calls[kind]():
                raise SystemExit(f"a call failed ({kind})")
            samples[kind].append(time.perf_counter() - started)
    return samples


def concurrent(agents: list[Agent], kind: str, proposal_id: str) -> tuple[float, int, int]:
    """CLIENTS agents call for PHASE_SECONDS; (successful calls per second, successes, failures)."""
    done, failed = [0], [0]
    lock = threading.Lock()
    stop_at = time.perf_counter() + PHASE_SECONDS

    def client(agent: Agent):
        call = (
            (lambda: agent.bare(proposal_id)) if kind == "bare" else (lambda: agent.allowed_call(report=True))
        )
        while time.perf_counter() < stop_at:
            ok = call()
            with lock:
                (done if ok else failed)[0] += 1

    threads = [threading.Thread(target=client, args=(agent,)) for agent in agents]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return done[0] / (time.perf_counter() - started), done[0], failed[0]


def cpu_seconds(pid: int) -> float:
    """A process's user + system CPU so far (/proc/<pid>/stat, fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle_outbox(deadline_seconds: float) -> None:
    """Wait until the worker has settled every held continuation (its tick claims each once due): recorded
    it not sent (the agent had consumed the decision), or tried to send it (a call that failed before its
    consume: its agent had not started)."""
    from django.db import connection

    from approvals.models import OutboxMessage

    deadline = time.monotonic() + deadline_seconds
    # A row tried once and failed is settled for this purpose (the note counts it): it waits for its
    # retry, which the card URL's port never answers.
    while OutboxMessage.objects.filter(status=OutboxMessage.Status.PENDING, attempts=0).exists():
        if time.monotonic() > deadline:
            raise SystemExit("the worker did not settle the held continuations")
        time.sleep(0.5)  # polling the worker's progress, with a deadline
    connection.close()


def main() -> list[dict]:
    environment = scratch_environment("reviewer_bench_r7")
    setup_django(environment, settings="bench.settings")
    from django.conf import settings
    from django.db import connection

    from approvals.models import OutboxMessage
    from reviewer_gate.gate import Gate, MemoryUsedStore, StaticKeySource
    from tests import factories

    tenant = factories.make_tenant()
    pull_row = factories.make_agent(tenant, api_token=API_TOKEN, card_url="")
    # An A2A agent: a card URL on a loopback port nothing listens on (see the docstring).
    nowhere = free_port()
    a2a_row = factories.make_agent(
        tenant,
        "refund-a2a",
        api_token=A2A_API_TOKEN,
        push_token="push-a2a",  # noqa: S106 (a scratch agent's token)
        card_url=f"http://127.0.0.1:{nowhere}/.well-known/agent-card.json",
    )
    factories.make_policy(tenant, "refunds", tool_pattern="payments.refund", outcome="allow")
    for number in range(REVIEWERS):
        factories.make_user(f"reviewer-{number}", tenant=tenant)
    connection.close()
    settle_within = settings.ANSWERED_CONTINUATION_DELAY_SECONDS + 60

    port = int(os.environ.get("BENCH_PORT") or 0) or free_port()
    server = start_daphne(environment, port)
    worker = start_worker(environment, settings="bench.settings")  # as deployed: it chains the audit trail
    base = f"http://127.0.0.1:{port}"
    latencies: dict[str, list[float]] = {kind: [] for kind in KINDS}
    rounds: dict[str, list[float]] = {"R1r": [], "R1rc": [], "R7": [], "R7c": []}
    rates: dict[str, list[float]] = {kind: [] for kind in KINDS}
    failures = dict.fromkeys(KINDS, 0)
    settling = [0.0, 0]  # the worker's CPU seconds while R7c's held continuations settled, their calls
    load = []
    try:
        jwks = httpx.get(f"{base}/.well-known/jwks.json").json()

        def gate(row):
            return Gate(
                issuer=settings.REVIEWER_ISSUER,
                audience=row.audience,
                keys=StaticKeySource(jwks),
                used_store=MemoryUsedStore(),
                tenant=tenant.slug,
            )

        pull_gate, a2a_gate = gate(pull_row), gate(a2a_row)
        agents = {
            "bare": [Agent(base, pull_gate) for _ in range(CLIENTS)],
            "a2a": [Agent(base, a2a_gate, A2A_API_TOKEN) for _ in range(CLIENTS)],
        }
        agents["pull"] = agents["bare"]
        pull, a2a = agents["pull"][0], agents["a2a"][0]
        first = pull.http.post(
            "/api/v1/proposals", json={"task_id": "task-bare", "request": factories.approval_request()}
        )
        proposal_id = first.json()["proposal_id"]
        interleaved(pull, a2a, proposal_id, 0)  # warm-up
        settle_outbox(settle_within)
        for number in range(ROUNDS):
            load.append(os.getloadavg()[0])
            samples = interleaved(pull, a2a, proposal_id, number)
            for kind in KINDS:
                latencies[kind] += samples[kind]
            bare50 = percentile(samples["bare"], 0.5)
            rounds["R1r"].append(percentile(samples["pull"], 0.5) / bare50)
            rounds["R1rc"].append(percentile(samples["a2a"], 0.5) / bare50)
            settle_outbox(settle_within)  # R1rc's held continuations, before the timed phases
            order = KINDS[number % 3 :] + KINDS[: number % 3]
            phase: dict[str, float] = {}
            for kind in order:
                before = cpu_seconds(worker.pid)
                rate, done, failed = concurrent(agents[kind], kind, proposal_id)
                phase[kind] = rate
                rates[kind].append(rate)
                failures[kind] += failed
                if kind == "a2a":
                    settle_outbox(settle_within)
                    settling[0] += cpu_seconds(worker.pid) - before
                    settling[1] += done
            rounds["R7"].append(phase["pull"] / phase["bare"])
            rounds["R7c"].append(phase["a2a"] / phase["bare"])
        load.append(os.getloadavg()[0])
        outbox = OutboxMessage.objects.filter(agent=a2a_row)
        held = outbox.count()
        not_sent = outbox.filter(status=OutboxMessage.Status.DELIVERED, last_error="").count()
        sent_and_failed = outbox.exclude(last_error="").count()
        refused = {
            kind: sum((agent.refused for agent in agents[kind]), Counter()) for kind in ("pull", "a2a")
        }
        connection.close()
    finally:
        stop_process(worker)
        server.terminate()
        server.wait(timeout=30)

    bare50, bare95 = percentile(latencies["bare"], 0.5), percentile(latencies["bare"], 0.95)
    bare_rate = sum(rates["bare"]) / ROUNDS
    loads = f"load average {min(load):.1f}–{max(load):.1f}"
    outbox_note = (
        f"{held} continuations held, {not_sent} settled not sent, {sent_and_failed} sent to the card URL "
        f"and failed (those of calls that failed before their consume); the worker's CPU over R7c's "
        "phases and their settling: "
        f"{settling[0] * 1000 / max(settling[1], 1):.2f} ms per call"
    )
    rows = []
    for row_id, kind, who in (("R1r", "pull", "a pull agent"), ("R1rc", "a2a", "an agent with a card URL")):
        call50, call95 = percentile(latencies[kind], 0.5), percentile(latencies[kind], 0.95)
        rows.append(
            {
                "id": row_id,
                "what": f"REST allowed call, {who} (submit with the decision in the answer → verify → "
                + ("outcome, consumed at intake)" if CONSUME_AT_INTAKE else "consume → outcome)"),
                "baseline": f"bare GET p50 {ms(bare50)} / p95 {ms(bare95)}",
                "measured": f"p50 {ms(call50)} / p95 {ms(call95)}",
                "ratio": round(call50 / bare50, 2),
                "target": "p50 ≤ 3x",
                "note": f"p50 ratio's {spread(rounds[row_id])}; {len(latencies[kind])} calls, "
                f"{len(latencies['bare'])} bare requests, in turns; p95 ratio {call95 / bare95:.2f}x; "
                + (f"{outbox_note}; " if kind == "a2a" else "")
                + loads,
            }
        )
    for row_id, kind, who in (("R7", "pull", "pull agents"), ("R7c", "a2a", "agents with a card URL")):
        call_rate = sum(rates[kind]) / ROUNDS
        rows.append(
            {
                "id": row_id,
                "what": f"REST allowed calls (with the outcome) per second, {CLIENTS} concurrent {who}, "
                "one Daphne",
                "baseline": f"{bare_rate:.0f} bare req/s",
                "measured": f"{call_rate:.1f} calls/s",
                "ratio": round(call_rate / bare_rate, 2),
                "target": "≥ 0.33x",
                "note": f"{spread(rounds[row_id])}; failures: {failures[kind]} calls "
                f"({', '.join(f'{k}: {v}' for k, v in refused[kind].items()) or 'none'}), "
                f"{failures['bare']} bare; " + (f"{outbox_note}; " if kind == "a2a" else "") + loads,
            }
        )
    return rows


if __name__ == "__main__":
    import json

    print(json.dumps(main(), indent=2))
