"""The standard doors' real clients, each getting its action approved by two people in Chromium: Reviewer
under Daphne with TLS on loopback, the refund resource and the agent's `TransactionAuthorization` of
tests/e2e/test_protected_api_e2e.py, and `auth0-python`'s CIBA calls (a client nobody here wrote). The
people sign in and approve on the proposal's page over https, as they would; the clients wait, polling,
and get what the votes released.
"""

import shutil

import httpx
import jwt
import pytest
from auth0.authentication import GetToken
from auth0.authentication.back_channel_login import BackChannelLogin

from approvals.models import Proposal
from tests.browser.conftest import chromium_pages, screenshot
from tests.browser.test_standard_doors import approve_in_the_browser
from tests.e2e.test_protected_api_e2e import (  # noqa: F401 (tls_reviewer and world are fixtures)
    BOT_TOKEN,
    REFUND,
    REFUNDS,
    agent_call,
    ciba_token_once_released,
    tls_reviewer,
    world,
)
from tests.waiting import wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.browser,
    pytest.mark.skipif(not shutil.which("chromium"), reason="needs Debian's chromium"),
]


@pytest.fixture
def new_page(tls_reviewer):  # noqa: F811 (the imported fixture, requested by name)
    with chromium_pages(tls_reviewer.url) as make:
        yield make


def waiting_proposal() -> Proposal:
    return wait_until(
        lambda: Proposal.objects.filter(state="awaiting_review").first(),
        "the proposal the client's request filed",
        timeout=30,
    )


def test_an_agent_through_transaction_authorization_runs_its_refund_once_after_two_people_approve_in_chromium(
    world,  # noqa: F811 (the imported fixture, requested by name)
    new_page,
):
    refunds, reviewer = world["refunds"], world["reviewer"]
    outcome: dict = {}
    calling = agent_call(refunds, reviewer, REFUND, outcome)  # meets the challenge, relays it, polls
    proposal = waiting_proposal()

    for number, person in enumerate(world["reviewers"], start=1):
        page = new_page()
        approve_in_the_browser(page, person, proposal, shows=["740.00", "EUR"])
        screenshot(page, f"tac-client-approved-{number}")
    calling.join(timeout=90)

    assert outcome.get("response") is not None, outcome
    assert outcome["response"].status_code == 200, outcome["response"].text
    assert refunds.refunds == [{"type": "refund", **REFUND}]  # run once, exactly as approved
    replay = httpx.post(
        f"{refunds.url}/refunds", json=REFUND, headers={"Authorization": f"Bearer {outcome['token']}"}
    )
    assert replay.status_code == 403 and len(refunds.refunds) == 1


def test_auth0_pythons_ciba_client_gets_the_token_once_two_people_approve_in_chromium(
    world,  # noqa: F811
    new_page,
    monkeypatch,
):
    reviewer = world["reviewer"]
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(reviewer.cert))  # requests trusts the test's certificate
    domain = f"127.0.0.1:{reviewer.port}"
    detail = {
        "type": "refund",
        "order_id": "1184",
        "amount": "610.00",
        "currency": "EUR",
        "locations": [REFUNDS],
    }
    started = BackChannelLogin(domain, "refund-bot", client_secret=BOT_TOKEN).back_channel_login(
        binding_message="Refund 1184: code P3X9",
        login_hint="requester",
        scope="openid",
        authorization_details=[detail],
    )
    tokens = GetToken(domain, "refund-bot", client_secret=BOT_TOKEN)
    proposal = waiting_proposal()

    for number, person in enumerate(world["reviewers"], start=1):
        page = new_page()
        approve_in_the_browser(page, person, proposal, shows=["Refund 1184: code P3X9", "610.00"])
        screenshot(page, f"ciba-client-approved-{number}")

    answer = ciba_token_once_released(tokens, started["auth_req_id"])
    assert answer["authorization_details"] == [detail]
    claims = jwt.decode(answer["access_token"], options={"verify_signature": False})
    assert claims["decision"] == "approved" and claims["authorization_details"] == [detail]
    assert len(claims["approvers"]) == 2  # both votes, given in the browser
