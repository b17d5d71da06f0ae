"""The load test's users (bench/load/run.py starts everything and runs this headless; README "Performance").

Two kinds of users, over two Daphne processes (LOAD_SEED names the seed file run.py writes):

- `Agent`: what the demo client does. It sends a refund request to the demo refund agent over A2A
  (JSON-RPC `SendMessage`, return immediately, Reviewer's webhook as push config); the agent parks the
  task and tells Reviewer (its push, and `POST /api/v1/proposals` through reviewer-gate, which retries
  503 with Retry-After). Most amounts are small and allowed by policy (the common path: decision at
  intake, delivered by a worker, consumed by the agent); one in REVIEW_EVERY needs a reviewer.
  Every task id sent is written to the sent file, so run.py can check that each reached Reviewer.
- `Reviewer`: a person with a TOTP device who signs in (password + code from the device secret), then
  loops: the queue page, one waiting proposal's page, approve it (`POST .../decide`).

Votes need a step-up: the policy's window is 900 s (`step_up="900"`), so a reviewer's first vote carries
a fresh code and the next ones ride on it, as at a desk. Per-vote codes are single-use per 30 s step and
device, so one person could vote twice a minute at most: that measures the authenticator, not Reviewer.

Overload: a 503 is recorded as a failure (so it shows in errors by status) and the user waits what
Retry-After says before its next request, like the SDK.
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

from locust import FastHttpUser, HttpUser, between, constant_throughput, task

from bench.load.totp import code_for

SEED = json.loads(open(os.environ["LOAD_SEED"]).read())  # noqa: SIM115, PTH123 (read once at import)
RATE = float(os.environ.get("LOAD_RATE", "5"))  # refund requests per second, all agent users together
AGENT_USERS = int(os.environ.get("LOAD_AGENT_USERS", "40"))
REVIEW_EVERY = int(os.environ.get("LOAD_REVIEW_EVERY", "10"))
SENT_FILE = SEED["sent_file"]
CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
DIGEST = re.compile(r'name="digest" value="([^"]+)"')
PROPOSAL = re.compile(r'href="/proposals/([0-9a-f-]{36})/"')

_reviewers = itertools.count()
_agents = itertools.count()


def _pause_after(response) -> None:
    if response.status_code == 503:
        try:
            time.sleep(min(float(response.headers.get("Retry-After", "1")), 10))
        except ValueError:
            time.sleep(1)


class Agent(FastHttpUser):
    """Intake through the demo refund agent (A2A), as examples/demo_client.py sends it."""

    weight = AGENT_USERS
    host = SEED["agent_url"]
    wait_time = constant_throughput(RATE / AGENT_USERS)

    def on_start(self):
        # Start somewhere in one period, not all at once: a steady stream of requests, not a burst of
        # AGENT_USERS at the first second (which the overload limit would answer with 503s).
        time.sleep(random.uniform(0, AGENT_USERS / RATE))
        self.number = next(_agents)
        self.webhook = SEED["webhooks"][self.number % len(SEED["webhooks"])]
        self.sent = open(SENT_FILE, "a", buffering=1)  # noqa: SIM115, PTH123 (one line per task)

    @task
    def refund(self):
        n = random.randrange(10**9)
        review = random.randrange(REVIEW_EVERY) == 0
        amount = f"{random.randint(101, 900)}.00" if review else f"{random.randint(5, 99)}.00"
        body = {
            "jsonrpc": "2.0",
            "id": str(uuid.uuid4()),
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": str(uuid.uuid4()),
                    "role": "ROLE_USER",
                    "parts": [{"text": f"Please refund EUR {amount} for order {n} (load test)"}],
                    "metadata": {"principal": {"id": "requester", "display": "Rita Requester"}},
                },
                "configuration": {
                    "returnImmediately": True,
                    "taskPushNotificationConfig": {"url": self.webhook, "token": SEED["push_token"]},
                },
            },
        }
        name = "A2A SendMessage (review)" if review else "A2A SendMessage (allowed)"
        with self.client.post(
            "/", json=body, headers={"A2A-Version": "1.0"}, name=name, catch_response=True
        ) as response:
            try:
                task_id = response.json()["result"]["task"]["id"]
            except (ValueError, KeyError, TypeError):
                response.failure(f"no task in the reply: HTTP {response.status_code} {response.text[:200]}")
                return
            self.sent.write(f"{task_id} {'review' if review else 'allowed'}\n")


class Reviewer(HttpUser):
    """A reviewer at the queue: sign in once, then open a waiting proposal and approve it."""

    weight = int(os.environ.get("LOAD_REVIEWER_USERS", "4"))
    host = SEED["daphnes"][0]
    wait_time = between(0.5, 1.5)

    def on_start(self):
        number = next(_reviewers)
        self.person = SEED["reviewers"][number % len(SEED["reviewers"])]
        self.base = SEED["daphnes"][number % len(SEED["daphnes"])]
        self.last_t = [0]
        self.fresh = False
        page = self.client.get(f"{self.base}/accounts/login/", name="GET /accounts/login/")
        form = {
            "csrfmiddlewaretoken": CSRF.search(page.text).group(1),
            "username": self.person["username"],
            "password": self.person["password"],
            "otp_token": code_for(self.person["key"], self.last_t),
        }
        for _attempt in range(2):  # a code this device already used (an earlier stage) is refused once
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

    @task
    def vote(self):
        queue = self.client.get(f"{self.base}/", name="GET / (queue)")
        _pause_after(queue)
        waiting = list(dict.fromkeys(PROPOSAL.findall(queue.text)))[:10]
        if not waiting:
            return
        proposal = random.choice(waiting)
        url = f"{self.base}/proposals/{proposal}/"
        page = self.client.get(url, name="GET /proposals/[id]/")
        _pause_after(page)
        csrf, digest = CSRF.search(page.text), DIGEST.search(page.text)
        if page.status_code != 200 or not (csrf and digest):
            return  # decided meanwhile (no form any more)
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
            else:
                errors = re.findall(r'class="[^"]*error[^"]*"[^>]*>([^<]{3,200})<', response.text)
                response.failure(f"HTTP {response.status_code}: {' / '.join(errors)[:200]}")
                self.fresh = False
            _pause_after(response)
