"""The demo itself, walked in real Chromium as a newcomer takes it: `manage.py run_demo` (what `make demo`
runs) on its embedded default (SQLite, the in-memory channel layer, the demo refund agent), its data in a
temporary folder (REVIEWER_DATA_DIR), signed in with the passwords it prints and the codes of the
`totp_code` command it tells the newcomer to run.

The walk: the queue with the demo client's three refunds; the EUR 1,850.00 refund's page; its two
finance approvals (the demo's large-refunds policy), after which the demo agent refunds it once; the
EUR 12.99 refund rejected with a reason after a first try without one (the code typed survives the
error); what each person decided; the audit and metrics pages as the auditor; the admin's groups and
policies as demo-admin; a proposal on a 390 px phone. Each person signs in and votes at most once, so
no one needs a third code within one 30-second step (each code works once, and the next step's is the
latest one django-otp accepts early).

Each step saves a screenshot: test-output/screenshots/test_demo_walk/NN-<step>.png. At the end run_demo
gets SIGTERM and stops its children; none may be left, and the demo's logs hold no warning or error."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import ROOT, Steps, chromium_pages
from tests.browser.test_reviewing import wait_until_live
from tests.examples.harness import free_port
from tests.waiting import wait_until

# No django_db mark: the demo has its own database, and the suite's is neither set up nor flushed here.
pytestmark = [pytest.mark.browser, pytest.mark.e2e]

READY_LINE = "Ctrl-C stops everything."
STARTUP_SECONDS = 120  # migrate and seed on a fresh SQLite file, three children, three A2A round trips
DEMO_AMOUNTS = {"1182": "EUR 40.00", "1190": "EUR 12.99", "1204": "EUR 1,850.00"}


def newcomer_environment(data_dir: Path) -> dict:
    """What a newcomer's shell has: none of the variables Reviewer or the demo agent read (.env.example
    lists Reviewer's; the suite's CI pass sets DATABASE_URL and REDIS_URL), only the data folder."""
    names = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", (ROOT / ".env.example").read_text(), re.M))
    assert {"DATABASE_URL", "REDIS_URL", "REVIEWER_DATA_DIR", "SECRET_KEY"} <= names

    def read_by_the_demo(name: str) -> bool:
        return (
            name in names
            or name.removesuffix("_FILE") in names
            or name.startswith(("REFUND_AGENT_", "DJANGO_", "PYTEST_"))
        )

    environment = {name: value for name, value in os.environ.items() if not read_by_the_demo(name)}
    return {**environment, "REVIEWER_DATA_DIR": str(data_dir)}


class Demo:
    """`manage.py run_demo` in a process of its own, its output in a file."""

    def __init__(self, tmp_path: Path):
        self.data_dir = tmp_path / "data"
        self.env = newcomer_environment(self.data_dir)
        self.port, self.agent_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.output = tmp_path / "run_demo.out"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with self.output.open("w") as output:
            self.process = subprocess.Popen(  # noqa: S603 (our own interpreter and manage.py)
                [
                    sys.executable,
                    "manage.py",
                    "run_demo",
                    "--port",
                    str(self.port),
                    "--agent-port",
                    str(self.agent_port),
                ],
                cwd=ROOT,
                env=self.env,
                stdout=output,
                stderr=subprocess.STDOUT,
            )

    def printed(self) -> str:
        return self.output.read_text(errors="replace")

    def wait_until_ready(self) -> str:
        process = self.process
        assert process is not None, "start() first"

        def ready():
            if READY_LINE in self.printed():
                return self.printed()
            if process.poll() is not None:
                raise AssertionError(f"run_demo exited with {process.returncode}:\n{self.printed()}")
            return None

        return wait_until(ready, "run_demo ready", timeout=STARTUP_SECONDS, interval=0.2, detail=self.printed)

    def children(self) -> dict[str, int]:
        return {
            name: int(pid) for name, pid in re.findall(r"^started (\S+) \(pid (\d+)\)", self.printed(), re.M)
        }

    def stop(self) -> int | None:
        """SIGTERM, as Ctrl-C's sibling: run_demo stops its children in order, then exits."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        return self.process.returncode

    def run(self, printed_command: str) -> str:
        """A command the demo printed, as the newcomer runs it in another terminal of the same shell."""
        words = shlex.split(printed_command)
        assignments = dict(word.split("=", 1) for word in words if re.fullmatch(r"[A-Z_]+=.*", word))
        words = words[len(assignments) :]
        assert words[0] == sys.executable and words[1] == "manage.py", printed_command
        result = subprocess.run(  # noqa: S603 (the command the demo printed: our interpreter, manage.py)
            words,
            cwd=ROOT,
            env={**self.env, **assignments},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return result.stdout

    def logs(self) -> dict[str, str]:
        return {
            path.name: path.read_text(errors="replace")
            for path in sorted((self.data_dir / "demo" / "logs").glob("*.log"))
        }

    def ledger(self) -> list[dict]:
        path = self.data_dir / "demo" / "refund-agent" / "ledger.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def repository_demo_files() -> dict[str, int]:
    """What a default demo keeps under the repository's data/demo/ (its logs, the client's count, the
    agent's ledger), each file with its modification time. Only demo/: other tests' processes running
    beside this one may write data/'s development secret."""
    folder = ROOT / "data" / "demo"
    return {str(path): path.stat().st_mtime_ns for path in folder.rglob("*") if path.is_file()}


def alive(pid: int) -> bool:
    """A process with this PID that is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class Newcomer:
    """What the newcomer reads in the demo's output and does with it."""

    def __init__(self, demo: Demo, printed: str):
        self.demo = demo
        self.passwords = dict(
            re.findall(r"^  (\S+)\s+(\S+)\s+(?:reviewer|admin|compliance)\b", printed, re.M)
        )
        assert {"reviewer1", "reviewer2", "requester", "demo-admin", "auditor"} <= set(self.passwords)
        welcome = printed[printed.index("Reviewer is running:") :]
        sign_in_at = re.search(r"sign in at (\S+)\)", welcome)
        assert sign_in_at is not None and sign_in_at.group(1) == f"{demo.url}/accounts/login/", welcome
        self.login_path = "/accounts/login/"
        code_command = re.search(r"and the code from\n\s+(.+ manage\.py totp_code .+)\n", welcome)
        assert code_command is not None, welcome
        # The printed command names reviewer1 and reviewer2; the other people are in the summary's line.
        self.totp_command = code_command.group(1).split(" totp_code ")[0] + " totp_code"
        # From another terminal, the command must find this demo's database, not data/'s.
        assert self.totp_command.startswith(f"REVIEWER_DATA_DIR={demo.data_dir} "), self.totp_command
        assert re.search(r"^Current one-time codes: python manage.py totp_code .*\bauditor\b", printed, re.M)

    def code(self, username: str) -> str:
        output = self.demo.run(f"{self.totp_command} {username}")
        found = re.fullmatch(rf"{re.escape(username)}\s+(\d{{6}})  \(\d+ s left\)\n", output)
        assert found is not None, output
        return found.group(1)

    def sign_in(self, page, username: str) -> None:
        page.goto(self.login_path)
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(self.passwords[username])
        page.get_by_label("One-time code").fill(self.code(username))
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("navigation", name="Main")).to_be_visible()


def test_demo_walk(tmp_path, steps):
    demo = Demo(tmp_path)
    data_before = repository_demo_files()
    demo.start()
    try:
        printed = demo.wait_until_ready()
        children = demo.children()
        assert set(children) == {"reviewer", "worker", "refund-agent"}, printed
        assert printed.count("AUTH_REQUIRED") == 3, printed
        newcomer = Newcomer(demo, printed)
        with chromium_pages(demo.url) as new_page:
            rejected_path = walk(demo, newcomer, new_page, steps)
    finally:
        returncode = demo.stop()
    assert returncode == 0, demo.printed()
    assert "Stopped." in demo.printed()
    assert [name for name, pid in children.items() if alive(pid)] == []

    # The agent ran the approved refund once, and never the rejected one (nor the undecided one).
    ledger = demo.ledger()
    assert [(entry["order_id"], entry["amount"], entry["currency"]) for entry in ledger] == [
        ("1204", "1850.00", "EUR")
    ]
    # Nothing to warn about but the deliberate rejection without a reason (a vote refused: 403).
    expected = f"WARNING django.request Forbidden: {rejected_path}decide"
    for name, text in demo.logs().items():
        lines = [line for line in text.splitlines() if not line.endswith(expected)]
        for word in ("WARNING", "ERROR", "Traceback"):
            found = [line for line in lines if word in line]
            assert found == [], f"{word} in {name}:\n" + "\n".join(found)
    assert sum(line.endswith(expected) for line in demo.logs()["reviewer.log"].splitlines()) == 1
    # Everything went to the data folder given, none to the repository's data/.
    assert (demo.data_dir / "reviewer.sqlite3").exists()
    assert (demo.data_dir / "demo" / "demo-client.sent").read_text().strip() == "3"
    assert repository_demo_files() == data_before


def walk(demo: Demo, newcomer: Newcomer, new_page, steps: Steps) -> str:
    """The walk; returns the path of the proposal rejected."""
    # reviewer1: the queue lists the three refunds, each amount with its currency.
    riley = new_page()
    newcomer.sign_in(riley, "reviewer1")
    expect(riley.get_by_role("heading", name="To decide", level=1)).to_be_visible()
    wait_until_live(riley)
    rows = riley.locator("main a[href^='/proposals/']")
    expect(rows).to_have_count(3)
    headlines = {order: f"Refund {amount} · order:{order}" for order, amount in DEMO_AMOUNTS.items()}
    assert sorted(rows.all_inner_texts()) == sorted(headlines.values())
    amounts = riley.locator("td[data-label=Amount] .amount")
    assert sorted(amounts.all_inner_texts()) == sorted(DEMO_AMOUNTS.values())
    links = {
        order: riley.get_by_role("link", name=headline).get_attribute("href")
        for order, headline in headlines.items()
    }
    steps.shot(riley, "queue")

    # The large refund's page: consequence first, the currency wherever there is an amount, evidence,
    # the two approvals it needs; the headline's target is the one "Earlier on the same target" names.
    riley.goto(links["1204"])
    wait_until_live(riley)
    expect(riley.get_by_role("heading", level=1)).to_have_text(headlines["1204"])
    consequence = riley.locator("section", has=riley.locator("#h-consequence"))
    expect(consequence).to_contain_text("Refund EUR 1,850.00 · order:1204")
    expect(consequence.locator(".facts__row", has_text="How much").locator(".amount")).to_have_text(
        "EUR 1,850.00"
    )
    expect(consequence).to_contain_text("it cannot be undone")
    history = riley.locator("section", has=riley.locator("#h-history"))
    expect(history.locator("code").nth(1)).to_have_text("order:1204")
    arguments = riley.locator("section", has=riley.locator("#h-arguments"))
    expect(arguments).to_contain_text("currency")
    expect(arguments).to_contain_text("EUR")
    evidence = riley.locator("section", has=riley.locator("#h-evidence"))
    expect(evidence).to_contain_text("Please refund EUR 1,850.00 for order 1204")
    why = riley.locator("section", has=riley.locator("#h-why"))
    expect(why).to_contain_text("large-refunds@1")
    expect(why).to_contain_text("2 approvals from Finance")
    approve = riley.locator("#decision button[value=approve]")
    expect(approve).to_contain_text("Approve refund of EUR 1,850.00")
    expect(riley.locator("#decision button[value=reject]")).to_contain_text("Reject refund of EUR 1,850.00")
    no_bare_amount = riley.evaluate(
        """() => [...document.querySelectorAll('main .amount')]
              .map((element) => element.textContent.trim())
              .filter((text) => !/^[A-Z]{3} /.test(text))"""
    )
    assert no_bare_amount == []
    steps.shot(riley, "large-refund")

    # The first of its two finance approvals, with a fresh code from the printed command.
    riley.locator("#id_otp_code").fill(newcomer.code("reviewer1"))
    approve.click()
    expect(riley.get_by_text("Your approval is recorded.")).to_be_visible()
    expect(riley.locator("#live")).to_contain_text("1 of 2")
    steps.shot(riley, "first-approval")

    # reviewer2 gives the second: the decision is released and the agent refunds.
    morgan = new_page()
    newcomer.sign_in(morgan, "reviewer2")
    morgan.goto(links["1204"])
    wait_until_live(morgan)
    morgan.locator("#id_otp_code").fill(newcomer.code("reviewer2"))
    morgan.locator("#decision button[value=approve]").click()
    expect(morgan.get_by_text("Your approval is recorded.")).to_be_visible()
    wait_until(lambda: demo.ledger(), "the demo agent's refund in its ledger", timeout=60)

    def agent_reported():
        morgan.reload()
        return "The agent reports the work done" in morgan.locator("#decision").inner_text()

    wait_until(agent_reported, "the proposal's outcome, succeeded", timeout=60, interval=0.5)
    steps.shot(morgan, "second-approval-succeeded")

    # The requester of the other two refunds sits in finance too: she decides Sam Lee's EUR 12.99.
    # Reject without a reason first: the page says why, and the code typed is still there and unspent.
    casey = new_page()
    newcomer.sign_in(casey, "requester")
    casey.goto(links["1190"])
    wait_until_live(casey)
    code = newcomer.code("requester")
    casey.locator("#id_otp_code").fill(code)
    reject = casey.locator("#decision button[value=reject]")
    expect(reject).to_contain_text("Reject refund of EUR 12.99")
    reject.click()
    expect(casey.locator("#decision")).to_contain_text("a rejection needs a reason")
    expect(casey.locator("#id_otp_code")).to_have_value(code)
    steps.shot(casey, "reject-without-reason")
    casey.get_by_label("Reason").fill("No photo of the broken mug in the ticket yet")
    reject.click()
    expect(casey.get_by_text("Your rejection is recorded; the agent will not act.")).to_be_visible()
    steps.shot(casey, "rejected")

    # What each decided, with the same headlines as the queue.
    riley.goto("/watching/")
    wait_until_live(riley)
    for order, state in (("1204", "Succeeded"), ("1190", "Rejected")):
        row = riley.locator("tr", has=riley.get_by_role("link", name=headlines[order]))
        expect(row).to_contain_text(state)
        expect(row.locator("td[data-label=Amount]")).to_have_text(DEMO_AMOUNTS[order])
    steps.shot(riley, "history")

    # The auditor: the audit trail and the metrics.
    auditor = new_page()
    newcomer.sign_in(auditor, "auditor")
    auditor.goto("/audit/demo/")
    expect(auditor.locator("code", has_text="pip install")).to_be_visible()
    steps.shot(auditor, "audit")
    auditor.goto("/audit/demo/metrics/")
    expect(auditor.get_by_role("columnheader", name="Policy version").first).to_be_visible()
    steps.shot(auditor, "metrics")

    # demo-admin: the admin's groups and policies.
    admin = new_page()
    newcomer.sign_in(admin, "demo-admin")
    admin.goto("/admin/")
    expect(admin.locator("#site-name")).to_be_visible()
    steps.shot(admin, "admin")
    admin.get_by_role("link", name="Approver groups").click()
    expect(admin.locator("#result_list")).to_contain_text("finance")
    steps.shot(admin, "admin-groups")
    admin.goto("/admin/approvals/policy/")
    expect(admin.locator("#result_list")).to_contain_text("large-refunds")
    steps.shot(admin, "admin-policies")

    # A proposal on a phone: the undecided EUR 40.00 refund at 390 px, nothing wider than the screen.
    riley.set_viewport_size({"width": 390, "height": 844})
    riley.goto(links["1182"])
    wait_until_live(riley)
    expect(riley.get_by_role("heading", level=1)).to_have_text(headlines["1182"])
    expect(riley.locator("#decision-bar")).to_be_visible()
    assert riley.evaluate("document.documentElement.scrollWidth") <= 390
    steps.shot(riley, "phone-proposal")
    return links["1190"]
