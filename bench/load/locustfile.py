"""The load test's users (bench/load/run.py starts everything and runs this headless; bench/README.md).

Reviewer itself is what is driven: no demo agent in the path. LOAD_SEED names the seed file run.py
writes; the users spread over every Daphne it lists.

- `Agent`: a REST agent registered without a card URL (a pull agent), as reviewer-gate's
  `ReviewerClient.request_approval` calls Reviewer. Each call: `POST /api/v1/proposals`; when policy
  decided at intake the signed decision is in the answer (`token`), so an allowed call is submit →
  verify (reviewer-gate's `Gate`, keys read once from the JWKS) → consume → outcome. One call in
  REVIEW_EVERY needs a reviewer: its continuation (long poll of the decision, verify, consume, outcome)
  runs in a greenlet of its own, as an agent waits on a person without holding up its other calls.
  Calls arrive open-loop (each in a greenlet of its own, on schedule, however slow the earlier
  ones are). Every call is written to the calls file once Reviewer answered its first request
  (run.py counts them against what it offered) and every consumed decision to the acts file (run.py
  checks that none acted twice).
- `Reviewer`: a person with a TOTP device who signs in (password + code from the device secret), then
  loops: the queue page, one waiting proposal's page, approve it through the page's form
  (`POST .../decide`, with a fresh code on the first vote; the policy's step-up window is 900 s, so
  later votes ride on it, as at a desk).

Overload: a 429 or 503 is recorded as a failure under its own name and the call waits what
Retry-After says before sending again, like the SDK; nothing is given up, so every accepted
proposal can settle. Agents are meant to get them; a reviewer never (Reviewer keeps people's request
slots apart from agents'): one 503 on a `Reviewer` line fails the run (checks.PEOPLE_LINES names them).
"""

import itertools
import json
import os
import random
import re
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import gevent
import gevent.pool
from locust import FastHttpUser, HttpUser, between, constant, events, task
from locust.exception import StopUser

from bench.load.totp import code_for
from reviewer_gate.gate import Gate, GateError, MemoryUsedStore, StaticKeySource, action_digest

SEED = json.loads(open(os.environ["LOAD_SEED"]).read())  # noqa: SIM115, PTH123 (read once at import)
RATE = float(os.environ.get("LOAD_RATE", "5"))  # agent calls per second, over every Daphne together
REVIEW_EVERY = int(os.environ.get("LOAD_REVIEW_EVERY", "10"))
STAGE = os.environ.get("LOAD_STAGE", "stage")
STAGE_SECONDS = float(os.environ.get("LOAD_SECONDS", "30"))  # how long calls arrive
CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
DIGEST = re.compile(r'name="digest" value="([^"]+)"')
PROPOSAL = re.compile(r'href="/proposals/([0-9a-f-]{36})/"')
# A form's refusals: its alerts, and the errors shown under a field (a refused one-time code)
ALERT = re.compile(r'(?:role="alert"|class="field__error")[^>]*>(.*?)</(?:p|div)>', re.S)
RETRIED = (429, 503)

_reviewers = itertools.count()
_agents = itertools.count()
# One agent process: one gate, one single-use store (a decision verified twice is refused here too).
GATE = Gate(
    issuer=SEED["issuer"],
    audience=SEED["audience"],
    keys=StaticKeySource(SEED["jwks"]),
    used_store=MemoryUsedStore(),
    tenant=SEED["tenant"],
)
CALLS = open(SEED["calls_file"], "a", buffering=1)  # noqa: SIM115, PTH123 (one line per call)
ACTS = open(SEED["acts_file"], "a", buffering=1)  # noqa: SIM115, PTH123 (one line per side effect)
# One line per call Reviewer accepted (its intake answered 2xx): what "nothing lost" is checked on. A call
# refused with 429/503 until the run stopped was refused, not lost: the agent still holds it.
ACCEPTED = open(SEED["accepted_file"], "a", buffering=1)  # noqa: SIM115, PTH123
CALLS_IN_FLIGHT = gevent.pool.Group()
# When the stage's time is up, calls under way may finish (run.py's drain settles the rest).
FINISH_SECONDS = float(os.environ.get("LOAD_FINISH_SECONDS", "20"))


TOTP_FILE = Path(SEED["totp_file"])
TOTP_STEPS = json.loads(TOTP_FILE.read_text()) if TOTP_FILE.exists() else {}


@events.test_stop.add_listener
def _finish_calls(**_kwargs) -> None:
    CALLS_IN_FLIGHT.join(timeout=FINISH_SECONDS)
    TOTP_FILE.write_text(json.dumps(TOTP_STEPS))


def _plain(fragment: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", fragment).split())


def refusal_text(html: str) -> str:
    """The refusals a decision form shows (its alerts), as text: what a failed vote says."""
    text = " / ".join(alert for alert in map(_plain, ALERT.findall(html)) if alert)
    title = re.search(r"<h1[^>]*>(.*?)</h1>", html, re.S)
    heading = _plain(title.group(1)) if title else ""
    return text or f"no refusal shown ({heading or 'no heading'}; {len(html)} bytes)"


def _retry_after(response) -> float:
    try:
        return min(float(response.headers.get("Retry-After", "1")), 10)
    except (TypeError, ValueError):
        return 1.0


def _fire(name: str, started: float, exception=None) -> None:
    """A whole call (not one request) as its own line of locust's table."""
    events.request.fire(
        request_type="CALL",
        name=name,
        response_time=(time.perf_counter() - started) * 1000,
        response_length=0,
        exception=exception,
        context={},
    )


class Agent(FastHttpUser):
    """A pull agent's gated tool calls over the REST API (reviewer-gate's request_approval, step by step
    through locust's client so every request is timed). One such user per Daphne, each offering its
    share of RATE to its own Daphne."""

    fixed_count = len(SEED["daphnes"])
    host = SEED["daphnes"][0]
    wait_time = constant(0)
    # Connections: calls overlap when Reviewer is slow. Under overload each call is refused and sent again
    # after Retry-After many times (about 2,000 answers a second at 96 calls/s on two Daphnes); with 64,
    # the attempts queued for a connection and a fifth of the calls were not answered once before the
    # step ended, so the harness offered less than its schedule (the run of 2026-12-06 on 28c94f3).
    concurrency = 256
    network_timeout = connection_timeout = 60.0

    def on_start(self):
        self.number = next(_agents)
        self.base = SEED["daphnes"][self.number % len(SEED["daphnes"])]
        self.headers = {"Authorization": f"Bearer {SEED['api_token']}"}
        self.period = len(SEED["daphnes"]) / RATE
        # The Daphnes' schedules interleave; each is a fixed schedule from the stage's start, so a
        # stalled load generator catches up instead of offering less.
        self.next_at = time.monotonic() + self.period * self.number / len(SEED["daphnes"])
        self.last_at = time.monotonic() + STAGE_SECONDS  # the schedule's end: LOAD_SECONDS of arrivals

    @task
    def arrive(self):
        """Open-loop arrivals: a call starts on schedule whatever the earlier ones are doing (each in a
        greenlet of its own), so a slow Reviewer meets the load it was offered instead of a closed loop
        slowing down with it."""
        if self.next_at >= self.last_at:
            raise StopUser  # the schedule is done; locust's run time lets the calls under way finish
        delay = self.next_at - time.monotonic()
        if delay > 0:
            gevent.sleep(delay)
        self.next_at += self.period
        CALLS_IN_FLIGHT.spawn(self.gated_call)

    def _send(self, method: str, path: str, name: str, body: dict | None = None, sent: str = ""):
        """One request, sent again after Retry-After while it is refused with 429/503; the answer, or
        None when it failed otherwise (recorded). `sent`: the calls file's line, written once Reviewer
        answered the first attempt (a call that never reached Reviewer is not counted as sent)."""
        while True:
            with self.client.request(
                method, self.base + path, json=body, headers=self.headers, name=name, catch_response=True
            ) as response:
                if sent and response.status_code:
                    CALLS.write(sent + "\n")
                    sent = ""
                if response.status_code in RETRIED:
                    response.failure(f"HTTP {response.status_code} (retried)")
                    pause = _retry_after(response)
                elif response.status_code >= 400 or response.status_code == 0:
                    response.failure(f"HTTP {response.status_code}: {(response.text or '')[:200]}")
                    return None
                else:
                    return response
            gevent.sleep(pause)

    def gated_call(self):
        review = random.randrange(REVIEW_EVERY) == 0
        amount = f"{random.randint(101, 900)}.00" if review else f"{random.randint(5, 99)}.00"
        action = {
            "tool": "payments.refund",
            "arguments": {"order_id": str(random.randrange(10**9)), "amount": amount, "currency": "EUR"},
        }
        request = {
            "request_id": str(uuid.uuid4()),
            "summary": f"Refund EUR {amount} (load test)",
            "action": action,
            "action_digest": action_digest(action),
            "principal": {"id": "requester", "display": "Rita Requester"},
        }
        task_id = f"task-{uuid.uuid4()}"
        started = time.perf_counter()
        answer = self._send(
            "POST",
            "/api/v1/proposals",
            "POST /api/v1/proposals (review)" if review else "POST /api/v1/proposals (allowed)",
            {"task_id": task_id, "context_id": "", "request": request},
            sent=f"{STAGE} {task_id} {'review' if review else 'allowed'} {time.time():.3f}",
        )
        if answer is None:
            return
        ACCEPTED.write(f"{task_id}\n")
        receipt = answer.json()
        if receipt.get("token"):
            self._release(task_id, request, receipt["token"], started, "allowed call")
        elif review:
            gevent.spawn(self._await_decision, task_id, request, receipt["proposal_id"], started)
        else:
            _fire("allowed call", started, RuntimeError(f"no decision at intake: {receipt.get('state')}"))

    def _await_decision(self, task_id: str, request: dict, proposal_id: str, started: float) -> None:
        """A reviewed call's continuation: long-poll the decision until a reviewer approved it."""
        while True:
            answer = self._send(
                "GET", f"/api/v1/proposals/{proposal_id}/decision?wait=30", "GET decision (long poll)"
            )
            if answer is None:
                return
            body = answer.json()
            if body.get("token"):
                self._release(task_id, request, body["token"], started, "reviewed call")
                return
            if body.get("state") not in ("awaiting_review", "pending"):
                _fire("reviewed call", started, RuntimeError(f"closed without a decision: {body}"))
                return

    def _release(self, task_id: str, request: dict, token: str, started: float, name: str) -> None:
        try:
            decision = GATE.verify(
                token,
                task_id=task_id,
                request_id=request["request_id"],
                action_digest=request["action_digest"],
            )
        except GateError as error:
            _fire(name, started, error)
            return
        if not decision.approved:
            _fire(name, started, RuntimeError(f"not approved: {decision.decision}"))
            return
        if decision.consume:
            consumed = self._send(
                "POST", f"/api/v1/decisions/{decision.jti}/consume", "POST consume", {"rev": decision.rev}
            )
            if consumed is None:
                _fire(name, started, RuntimeError("consume refused"))
                return
        ACTS.write(f"{decision.jti} {task_id}\n")  # the side effect, once per verified decision
        reported = self._send(
            "POST",
            f"/api/v1/decisions/{decision.jti}/outcome",
            "POST outcome",
            {"status": "succeeded", "transaction_id": f"tx-{decision.jti}"},
        )
        _fire(name, started, None if reported is not None else RuntimeError("outcome refused"))


class Reviewer(HttpUser):
    """A reviewer at the queue: sign in once, then open a waiting proposal and approve it."""

    fixed_count = int(os.environ.get("LOAD_REVIEWER_USERS", "2"))
    host = SEED["daphnes"][0]
    wait_time = between(0.5, 1.5)

    def on_start(self):
        number = next(_reviewers)
        self.person = SEED["reviewers"][number % len(SEED["reviewers"])]
        self.base = SEED["daphnes"][number % len(SEED["daphnes"])]
        # The last step a code of this device was used in, kept across the stages (each a new locust):
        # django-otp refuses a code it has seen.
        self.last_t = TOTP_STEPS.setdefault(self.person["username"], [0])
        self.fresh = False
        page = self.client.get(f"{self.base}/accounts/login/", name="GET /accounts/login/")
        form = {
            "csrfmiddlewaretoken": CSRF.search(page.text).group(1),
            "username": self.person["username"],
            "password": self.person["password"],
            "otp_token": code_for(self.person["key"], self.last_t),
        }
        for _attempt in range(2):  # a code refused (the clock's step just turned): the next step's
            with self.client.post(
                f"{self.base}/accounts/login/",
                data=form,
                headers={"Referer": f"{self.base}/accounts/login/"},
                name="POST /accounts/login/",
                allow_redirects=False,
                catch_response=True,
            ) as response:
                if response.status_code == 302:
                    return
                response.failure(f"HTTP {response.status_code}")
            form["otp_token"] = code_for(self.person["key"], self.last_t)  # the next step's code

    def _page(self, url: str, name: str):
        response = self.client.get(url, name=name)
        if response.status_code in RETRIED:
            time.sleep(_retry_after(response))
        return response

    @task
    def vote(self):
        queue = self._page(f"{self.base}/", "GET / (queue)")
        waiting = list(dict.fromkeys(PROPOSAL.findall(queue.text or "")))[:10]
        if not waiting:
            return
        url = f"{self.base}/proposals/{random.choice(waiting)}/"
        page = self._page(url, "GET /proposals/[id]/")
        csrf, digest = CSRF.search(page.text or ""), DIGEST.search(page.text or "")
        if page.status_code != 200 or not (csrf and digest):
            return  # decided meanwhile (no form any more)
        used_before = self.last_t[0]
        form = {
            "csrfmiddlewaretoken": csrf.group(1),
            "action": "approve",
            "digest": digest.group(1),
            "reason": "",
            "otp_code": "" if self.fresh else code_for(self.person["key"], self.last_t),
        }
        with self.client.post(
            f"{url}decide",
            data=form,
            headers={"Referer": url},
            name="POST /proposals/[id]/decide",
            allow_redirects=False,
            catch_response=True,
        ) as response:
            if response.status_code in (200, 302):
                self.fresh = True
            elif response.status_code == 403 and "No decision is open here" in response.text:
                response.success()  # another reviewer decided it first: a normal answer, not an error
            elif response.status_code in RETRIED:
                # Refused before Django saw it: the code was not used, the step-up window is as it was.
                self.last_t[0] = used_before
                response.failure(f"HTTP {response.status_code} (retried)")
            else:
                response.failure(f"HTTP {response.status_code}: {refusal_text(response.text or '')[:200]}")
                self.fresh = False
        if response.status_code in RETRIED:
            time.sleep(_retry_after(response))
