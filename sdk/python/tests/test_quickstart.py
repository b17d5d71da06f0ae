"""The README's quick start runs as written, with the installed package: only the Reviewer URL it
names is pointed at the fake Reviewer, and `refund` is a stand-in recording its calls."""

import re
import threading
from pathlib import Path

import reviewer_gate
from reviewer_gate.testing import decision_claims

README = Path(__file__).resolve().parents[1] / "README.md"


def quick_start() -> str:
    section = README.read_text().split("## Quick start", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


def test_the_quick_start_is_at_most_a_dozen_lines():
    assert len(quick_start().strip().splitlines()) <= 12


def test_the_quick_start_runs_and_refunds_once(reviewer, key, monkeypatch, capsys):
    code = quick_start().replace("https://reviewer.example.com", reviewer.url)
    refunds = []

    class Receipt:
        id = "tx-1"

    def refund(**arguments):
        refunds.append(arguments)
        return Receipt()

    def approve_when_submitted():
        while not reviewer.proposals:
            threading.Event().wait(0.01)  # bounded poll of the fake's record
        body = reviewer.proposals[-1]["body"]
        claims = decision_claims(
            issuer=reviewer.url,
            audience="urn:agent:refunds",
            task_id=body["task_id"],
            request_id=body["request"]["request_id"],
            action_digest=body["request"]["action_digest"],
            context_id=body["context_id"],
        )
        reviewer.decide(reviewer.proposal_id_of(body["task_id"]), key.sign(claims))

    threading.Thread(target=approve_when_submitted, daemon=True).start()
    exec(compile(code, "README quick start", "exec"), {"AGENT_API_TOKEN": "t", "refund": refund})  # noqa: S102

    (arguments,) = refunds
    assert arguments["amount"] == "40.00" and arguments["idempotency_key"]
    assert reviewer.outcomes_for(arguments["idempotency_key"]) == ["succeeded"]
    assert reviewer_gate.__version__ == "0.1.0"
