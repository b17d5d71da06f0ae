"""The TypeScript package @reviewer/gate against a running Reviewer (Daphne + worker): the examples of
examples/js for the OpenAI Agents SDK for JavaScript and Vercel's AI SDK run as `node` processes, as a
user runs them, pulling their decision; a reviewer signs in and decides in Chromium with a one-time
code; the example verifies, consumes, refunds once into its ledger with the decision id as the key,
and reports. Then the JS gate meets real tokens of this Reviewer it must refuse: replayed, tampered,
and another tenant's agent's.

The examples import the packed @reviewer/gate and their frameworks from examples/js/node_modules,
which `make pytest` installs from the lockfiles (`make js-examples`); nothing is downloaded here."""

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from approvals.models import Decision, PolicyVersion, Proposal
from approvals.states import State
from reviewer_gate import GateError, MemoryUsedStore, ReviewerClient
from reviewer_gate.approval import build_request
from tests import factories
from tests.browser.conftest import chromium_pages
from tests.e2e.test_a2a_loop import wait_for
from tests.examples.harness import stop_processes
from tests.reviewer_processes import REVIEWER_APP_WITH_STATIC_FILES

# The module's Daphne serves the pages' scripts and styles too (module_reviewer_stack reads this).
REVIEWER_APP = REVIEWER_APP_WITH_STATIC_FILES

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "js"
INSTALLED = EXAMPLES / "node_modules" / ".installed-from-lockfile"  # the stamp of `make js-examples`
NODE = shutil.which("node") or ""
AUDIENCE = "urn:agent:refunds-js"
API_TOKEN = "refunds-js-token"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
    # Marks, not a fixture's skip: the module's Reviewer is not started for nothing.
    pytest.mark.skipif(not NODE, reason="the JavaScript examples need Node 20 or newer (node not found)"),
    pytest.mark.skipif(
        not INSTALLED.exists(),
        reason="examples/js is not installed: `make js-examples` (make pytest does it when npm exists)",
    ),
]


def register(tenant, slug: str, audience: str, api_token: str) -> None:
    """A pull agent (no A2A server: Reviewer never calls it)."""
    factories.make_agent(tenant, slug, card_url="", audience=audience, api_token=api_token)


@pytest.fixture
def reviewer_a(reviewer_stack):
    """Acme's finance reviewer, who decides every refund of the agent registered here."""
    tenant = factories.make_tenant()
    reviewer = factories.make_user("reviewer_a", tenant=tenant, groups=["finance"], first_name="Alice")
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 1}]
    )
    register(tenant, "refunds-js", AUDIENCE, API_TOKEN)
    return reviewer


@pytest.fixture
def reviewer_page(reviewer_stack):
    """A page in headless Chromium on the stack's Reviewer (skipped without chromium)."""
    with chromium_pages(reviewer_stack.url) as new_page:
        yield new_page()


def node_env(tmp_path: Path) -> dict:
    """The agent's token, and a temporary folder of this test's for the gate's used-decision store (the
    client's default, FileUsedStore under the temporary directory): what the agent process remembers."""
    folder = tmp_path / "agent-tmp"
    folder.mkdir(exist_ok=True)
    return {**os.environ, "REVIEWER_API_TOKEN": API_TOKEN, "TMPDIR": str(folder)}


class Example:
    """`node examples/js/<script>` against the stack, in the background while a reviewer decides."""

    def __init__(self, script: str, stack, tmp_path: Path):
        self.stack, self.ledger = stack, tmp_path / "refunds.jsonl"
        self.process = subprocess.Popen(  # noqa: S603 (node and a script of this repository)
            [NODE, script, "--reviewer-url", stack.url, "--audience", AUDIENCE, "--ledger", str(self.ledger)]
            + ["--tenant", "acme", "--agent-slug", "refunds-js"],  # as registered: checked on both sides
            cwd=EXAMPLES,
            env=node_env(tmp_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def proposal(self) -> Proposal:
        """The proposal it submitted (or the example's own failure, if it ended before submitting)."""
        found = wait_for(
            lambda: Proposal.objects.first() or self.process.poll() is not None, "the proposal", self.stack
        )
        if not isinstance(found, Proposal):
            pytest.fail(f"the example ended first: {self.process.communicate()}")
        return found

    def output(self) -> str:
        stdout, stderr = self.process.communicate(timeout=60)
        assert self.process.returncode == 0, stderr
        return stdout.strip()

    def entries(self) -> list[dict]:
        return (
            [json.loads(line) for line in self.ledger.read_text().splitlines()]
            if self.ledger.exists()
            else []
        )


@pytest.fixture
def run_example(reviewer_stack, tmp_path):
    """Start an example (`run_example("ai-sdk-refund.js")`); one still running at the end is stopped."""
    started: list[Example] = []

    def start(script: str) -> Example:
        started.append(Example(script, reviewer_stack, tmp_path))
        return started[-1]

    yield start
    stop_processes([example.process for example in started])


def decide_in_chromium(page, reviewer, proposal: Proposal, verdict: str, reason: str = "") -> None:
    """Sign in with password and a one-time code, open the proposal, wait until the page is live (so
    it shows what happens next without a reload), decide with a fresh code."""
    from tests.browser.test_reviewing import sign_in, wait_until_live

    sign_in(page, reviewer)
    page.goto(f"/proposals/{proposal.id}/")
    wait_until_live(page)
    if reason:
        page.get_by_label("Reason").fill(reason)
    page.get_by_label("One-time code").fill(factories.totp_code(reviewer))
    page.get_by_role("button", name=verdict).click()


def page_says(page, heading: str) -> None:
    """The proposal's page shows `heading` over what happens (the decision's notice is not waited for:
    a live update of the panel may replace it first)."""
    from playwright.sync_api import expect

    expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible()


# The agent as another piece of its code would meet a decision token: its ReviewerClient (what the
# adapters call) verifies the token against what the agent asked for, then consumes it. Prints, for each
# token in order, "accepted" or the NotApproved code. `replica`: another process of the same agent,
# with a used-decision store of its own (empty).
PRESENT_TOKENS = """
import { MemoryUsedStore, NotApproved, ReviewerClient, Submission } from "@reviewer/gate";

const { agent, asked, tokens, replica } = JSON.parse(process.argv[1]);
const client = new ReviewerClient({
  reviewerUrl: agent.url, apiToken: agent.token, audience: agent.audience,
  ...(replica ? { usedStore: new MemoryUsedStore() } : {}),
});
const submission = new Submission(asked.task_id, asked.context_id, asked.request, asked.proposal_id, "");
const codes = {};
for (const [name, token] of tokens) {
  try {
    await client.release(submission, token);
    codes[name] = "accepted";
  } catch (error) {
    if (!(error instanceof NotApproved)) throw error;
    codes[name] = error.code;
  }
}
console.log(JSON.stringify(codes));
"""


def present_tokens(stack, tmp_path: Path, asked: dict, tokens: list, *, replica: bool = False) -> dict:
    """Run PRESENT_TOKENS in examples/js (its @reviewer/gate) as the agent registered here."""
    arguments = {
        "agent": {"url": stack.url, "token": API_TOKEN, "audience": AUDIENCE},
        "asked": asked,
        "tokens": tokens,
        "replica": replica,
    }
    done = subprocess.run(  # noqa: S603 (node and this module's script)
        [NODE, "--input-type=module", "-e", PRESENT_TOKENS, json.dumps(arguments)],
        cwd=EXAMPLES,  # where the bare import resolves, as in the examples
        env=node_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def asked_for(proposal: Proposal) -> dict:
    """What the agent asked for, as its Submission holds it."""
    return {
        "task_id": proposal.task_id,
        "context_id": proposal.context_id,
        "request": {
            "request_id": proposal.request_id,
            "action": proposal.action,
            "action_digest": proposal.action_digest,
        },
        "proposal_id": str(proposal.id),
    }


def assert_refunded_once(stack, proposal: Proposal, example: Example) -> None:
    wait_for(lambda: Proposal.objects.get(pk=proposal.pk).state == State.SUCCEEDED, "succeeded", stack)
    (entry,) = example.entries()
    assert (entry["order_id"], entry["amount"]) == ("1182", "40.00")
    assert entry["idempotency_key"] == str(Decision.objects.get(proposal=proposal).jti)


@pytest.mark.browser
@pytest.mark.parametrize("script", ["openai-agents-refund.js", "ai-sdk-refund.js"])
def test_an_example_refunds_once_after_approval_in_the_browser_and_refuses_the_replay(
    script, reviewer_stack, reviewer_a, reviewer_page, run_example, tmp_path
):
    example = run_example(script)
    proposal = example.proposal()
    assert (proposal.tool, proposal.summary) == ("payments.refund", "Refund EUR 40.00 for order 1182")

    decide_in_chromium(reviewer_page, reviewer_a, proposal, "Approve")

    assert example.output().startswith("refunded EUR 40.00 for order 1182: tx-")
    assert_refunded_once(reviewer_stack, proposal, example)
    page_says(reviewer_page, "Done: the agent reports this happened")  # its report, live on the page
    # The same decision again, to the same agent (its used-decision store), then to another replica
    # of it (Reviewer refuses the second consume): nothing runs twice.
    token = Decision.objects.get(proposal=proposal).token
    assert present_tokens(reviewer_stack, tmp_path, asked_for(proposal), [["replayed", token]]) == {
        "replayed": "replayed"
    }
    assert present_tokens(
        reviewer_stack, tmp_path, asked_for(proposal), [["replayed", token]], replica=True
    ) == {"replayed": "consume_refused:consumed"}
    assert len(example.entries()) == 1


@pytest.mark.browser
def test_a_rejection_in_the_browser_refunds_nothing(reviewer_a, reviewer_page, run_example):
    example = run_example("ai-sdk-refund.js")
    proposal = example.proposal()

    decide_in_chromium(reviewer_page, reviewer_a, proposal, "Reject", reason="already refunded")

    page_says(reviewer_page, "Rejected: this will not happen")
    assert example.output() == "Rejected by the reviewer: already refunded. Nothing was run."
    assert Proposal.objects.get(pk=proposal.pk).state == State.REJECTED
    assert example.entries() == []


def tampered(token: str, **claims) -> str:
    """The token with claims changed and its signature kept."""
    header, payload, signature = token.split(".")
    changed = {**json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))), **claims}
    encoded = base64.urlsafe_b64encode(json.dumps(changed).encode()).rstrip(b"=").decode()
    return f"{header}.{encoded}.{signature}"


def with_signature_changed(token: str) -> str:
    header, payload, signature = token.split(".")
    middle = len(signature) // 2  # not the last character, whose low bits may be padding
    flipped = "B" if signature[middle] == "A" else "A"
    return f"{header}.{payload}.{signature[:middle]}{flipped}{signature[middle + 1 :]}"


def test_the_js_gate_refuses_real_tokens_replayed_tampered_or_for_another_agent(reviewer_stack, tmp_path):
    """Refunds decided at intake by policy (allowed), so the tokens are Reviewer's own without a
    reviewer: Acme's agent's, and Globex's agent's (another tenant, another audience)."""
    for slug, audience, api_token in [
        ("acme", AUDIENCE, API_TOKEN),
        ("globex", "urn:agent:globex-refunds", "globex-token"),
    ]:
        tenant = factories.make_tenant(slug=slug, name=slug.title())
        factories.make_policy(
            tenant, "small-refunds", outcome=PolicyVersion.Outcome.ALLOW, tool_pattern="payments.refund"
        )
        register(tenant, f"{slug}-refunds", audience, api_token)

    def submitted(audience: str, api_token: str):
        client = ReviewerClient(
            reviewer_url=reviewer_stack.url,
            api_token=api_token,
            audience=audience,
            used_store=MemoryUsedStore(),
        )
        action = {"tool": "payments.refund", "arguments": {"order_id": "1182", "amount": "40.00"}}
        request = build_request(action, summary="Refund EUR 40.00", principal={"id": "requester"})
        submission = client.submit(request)
        assert submission.token, submission  # allowed at intake: the answer carries the decision
        return client, submission

    ours, submission = submitted(AUDIENCE, API_TOKEN)
    _, theirs = submitted("urn:agent:globex-refunds", "globex-token")
    token = submission.token
    asked = {
        "task_id": submission.task_id,
        "context_id": submission.context_id,
        "request": submission.request,
        "proposal_id": submission.proposal_id,
    }
    bigger = {"tool": "payments.refund", "arguments": {"order_id": "1182", "amount": "4000.00"}}
    forged = {
        "a claim changed": tampered(
            token, action_digest=build_request(bigger, summary="", principal={})["action_digest"]
        ),
        "the signature changed": with_signature_changed(token),
        "another tenant's agent's": theirs.token,
    }

    # The agent acts once on its decision and refuses it when it comes again.
    assert present_tokens(reviewer_stack, tmp_path, asked, [["first", token], ["again", token]]) == {
        "first": "accepted",
        "again": "replayed",
    }
    codes = present_tokens(
        reviewer_stack, tmp_path, asked, [["elsewhere", token], *forged.items()], replica=True
    )
    assert codes == {
        "elsewhere": "consume_refused:consumed",  # another replica: Reviewer's consume refuses it
        "a claim changed": "bad_signature",
        "the signature changed": "bad_signature",
        "another tenant's agent's": "wrong_audience",
    }
    # The Python gate names the same refusals for the same tokens.
    for name, forgery in forged.items():
        with pytest.raises(GateError) as refused:
            ours.gate.verify(
                forgery,
                task_id=submission.task_id,
                request_id=submission.request_id,
                action_digest=submission.action_digest,
            )
        assert refused.value.code == codes[name], name
