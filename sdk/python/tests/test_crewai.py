"""reviewer_gate.crewai with CrewAI's own crew loop (Crew.kickoff, its ReAct parsing, tool usage, cache and
retries) and a scripted model (no network, no real model); the fake Reviewer decides."""

import pytest

pytest.importorskip("crewai")  # with CrewAI's telemetry off (conftest.py)

from crewai import Agent, BaseLLM, Crew, Task  # noqa: E402
from crewai.tools import tool  # noqa: E402

from reviewer_gate import ReviewerClient, current_approval  # noqa: E402
from reviewer_gate.crewai import ReviewerTools  # noqa: E402
from reviewer_gate.describe import ToolDescription, ToolDescriptionError  # noqa: E402
from reviewer_gate.testing import decide_at_intake, decide_next_proposal  # noqa: E402

AUDIENCE = "urn:agent:crewai"


class ScriptedLLM(BaseLLM):
    """Calls refund once per amount in `amounts` (order 1182) in CrewAI's ReAct text, then answers with
    the last observation (what the tool, or the gate, said)."""

    def __init__(self, amounts=("40.00",)):
        super().__init__(model="scripted")
        self.amounts = list(amounts)

    def call(self, messages, *args, **kwargs):
        last = messages[-1]["content"] if isinstance(messages, list) else messages
        if not self.amounts:
            return f"Thought: done\nFinal Answer: {last.rsplit('Observation:', 1)[1].strip()}"
        arguments = f'{{"order_id": "1182", "amount": "{self.amounts.pop(0)}"}}'
        return f"Thought: refund\nAction: refund\nAction Input: {arguments}"

    def supports_function_calling(self):
        return False


@pytest.fixture
def refunds():
    return []


@pytest.fixture
def approvals(reviewer):
    client = ReviewerClient(
        reviewer_url=reviewer.url, api_token="crewai-token", audience=AUDIENCE, poll_seconds=1
    )
    return ReviewerTools(client, principal={"id": "u-7", "display": "Casey"}, decision_timeout=20)


def refund_function(refunds):
    def refund(order_id: str, amount: str) -> str:
        """Refund an order."""
        refunds.append((order_id, amount, current_approval().idempotency_key))
        return f"refunded {amount} for {order_id}"

    return refund


def kickoff(gated_tool, llm=None):
    agent = Agent(
        role="ops", goal="Refund orders.", backstory="Refunds.", llm=llm or ScriptedLLM(), tools=[gated_tool]
    )
    task = Task(description="Refund order 1182.", expected_output="The tool's answer.", agent=agent)
    return str(Crew(agents=[agent], tasks=[task]).kickoff().raw)


def decide_when_submitted(reviewer, key, **options):
    return decide_next_proposal(reviewer, key, audience=AUDIENCE, **{"seen": 0, **options})  # the first


def test_an_approved_call_runs_once_with_the_decision_id_as_key(approvals, reviewer, key, refunds):
    decide_when_submitted(reviewer, key)
    answer = kickoff(approvals.gate(refund_function(refunds)))
    assert answer == "refunded 40.00 for 1182"
    (proposal,) = reviewer.proposals
    assert proposal["body"]["request"]["action"] == {
        "tool": "refund",
        "arguments": {"order_id": "1182", "amount": "40.00"},
        "target": "order_id:1182",
    }
    assert proposal["body"]["request"]["principal"] == {"id": "u-7", "display": "Casey"}
    assert proposal["body"]["task_id"].startswith("crewai-")
    (consume,) = reviewer.consumes
    assert refunds == [("1182", "40.00", consume["jti"])]
    assert reviewer.outcomes_for(consume["jti"]) == ["succeeded"]


def test_a_rejection_is_what_the_model_reads_and_nothing_runs(approvals, reviewer, key, refunds):
    decide_when_submitted(reviewer, key, decision="rejected", reason="the parcel was delivered")
    answer = kickoff(approvals.gate(refund_function(refunds)))
    assert answer == "Rejected by the reviewer: the parcel was delivered. Nothing was run."
    assert refunds == [] and reviewer.consumes == []


def test_a_reviewers_edit_runs_the_edited_arguments(approvals, reviewer, key, refunds):
    edited = {"tool": "refund", "arguments": {"order_id": "1182", "amount": "25.00"}}
    decide_next_proposal(reviewer, key, audience=AUDIENCE, edit=edited)
    answer = kickoff(approvals.gate(refund_function(refunds)))
    assert [(order, amount) for order, amount, _key in refunds] == [("1182", "25.00")]
    assert answer == "refunded 25.00 for 1182"


def test_each_call_is_its_own_proposal_never_an_answer_from_crewais_cache(approvals, reviewer, key, refunds):
    decide_at_intake(reviewer, key, audience=AUDIENCE)
    # CrewAI refuses the same call twice in a row, and answers a repeated one from its cache otherwise.
    kickoff(approvals.gate(refund_function(refunds)), ScriptedLLM(amounts=["40.00", "5.00", "40.00"]))
    assert len(reviewer.proposals) == 3 and len(reviewer.consumed_at_intake) == 3
    assert [amount for _order, amount, _key in refunds] == ["40.00", "5.00", "40.00"]
    assert len({key for _order, _amount, key in refunds}) == 3  # one approval each, its own key


def test_a_tool_that_raises_after_approval_reports_unknown_and_is_not_retried(approvals, reviewer, key):
    decide_at_intake(reviewer, key, audience=AUDIENCE)
    attempts = []

    def refund(order_id: str, amount: str) -> str:
        """Refund an order."""
        attempts.append(order_id)
        raise ConnectionError("payments timed out")

    answer = kickoff(approvals.gate(refund))
    assert attempts == ["1182"] and len(reviewer.proposals) == 1  # CrewAI's retry asked for nothing
    (outcome,) = reviewer.outcomes  # its approval was consumed at intake
    assert outcome["body"]["status"] == "unknown"
    assert "whether it acted is unknown" in answer


def test_a_crewai_tool_is_gated_with_its_name_and_description(approvals, reviewer, key, refunds):
    decide_at_intake(reviewer, key, audience=AUDIENCE)
    refund_tool = tool("refund")(refund_function(refunds))  # CrewAI's @tool("refund")
    gated = approvals.gate(refund_tool)
    assert (gated.name, gated.args_schema) == ("refund", refund_tool.args_schema)
    assert gated.description.endswith("Tool Description: Refund an order.")  # described once
    assert kickoff(gated) == "refunded 40.00 for 1182"
    assert reviewer.proposals[-1]["body"]["request"]["consequences"]["tool_description"] == "Refund an order."


def test_a_described_tool_names_the_policy_tool_the_currency_and_the_runs_principal(reviewer, key, refunds):
    description = ToolDescription(
        name="payments.refund",
        summary="Refund {currency} {amount} for order {order_id}",
        currency="EUR",
        reversible=False,
        principal=lambda context: {"id": context["user_id"], "display": context["user_name"]},
    )
    decide_at_intake(reviewer, key, audience=AUDIENCE)  # a payments.* policy allows it
    client = ReviewerClient(reviewer_url=reviewer.url, api_token="t", audience=AUDIENCE, poll_seconds=1)
    approvals = ReviewerTools(client, context={"user_id": "u-9", "user_name": "Dana"})

    answer = kickoff(approvals.gate(refund_function(refunds), description))

    request = reviewer.proposals[-1]["body"]["request"]
    assert request["summary"] == "Refund EUR 40.00 for order 1182"
    assert request["action"]["tool"] == "payments.refund"
    assert request["principal"] == {"id": "u-9", "display": "Dana"}
    assert answer == "refunded 40.00 for 1182" and len(refunds) == 1
    assert reviewer.pulls == []  # the intake answer carried the decision


def test_a_description_naming_an_argument_the_tool_lacks_is_refused_at_gate(approvals, refunds):
    with pytest.raises(ToolDescriptionError) as refused:
        approvals.gate(refund_function(refunds), ToolDescription(summary="Refund to {iban}"))
    assert refused.value.field == "summary"
