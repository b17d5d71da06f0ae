"""The load test's check that agents never crowd people out (bench/load/checks.py, `make load`): it
fails on one reviewer request refused with 503, and counts agents' refusals apart."""

import uuid

from bench.load.checks import people_refused

AGENT_503 = '127.0.0.1:5000 - - [07/Dec/2026:03:00:00] "POST /api/v1/proposals" 503 98 '
AGENT_429 = '127.0.0.1:5000 - - [07/Dec/2026:03:00:00] "GET /api/v1/proposals/x/decision?wait=30" 429 98 '
PAGE_200 = '127.0.0.1:5001 - - [07/Dec/2026:03:00:01] "GET /" 200 5120 '
VOTE_503 = f'127.0.0.1:5001 - - [07/Dec/2026:03:00:02] "POST /proposals/{uuid.uuid4()}/decide" 503 98 '


def step(name: str, failures: list[dict] | None = None) -> dict:
    return {"name": name, "failures": failures or []}


def test_agents_refused_and_people_served_passes_and_counts_agents_refusals_apart(tmp_path):
    log = tmp_path / "daphne0-access.log"
    log.write_text("\n".join([AGENT_503, AGENT_503, AGENT_429, PAGE_200]) + "\n")
    agents_failed = {
        "name": "POST POST /api/v1/proposals (allowed)",
        "error": "HTTP 503 (retried)",
        "count": 2,
    }

    result = people_refused([log], [step("4x knee", [agents_failed])])

    assert result["ok"]
    assert (result["agents' 503s"], result["agents' 429s"]) == (2, 1)
    assert result["people's 503s (Daphnes' logs)"] == 0


def test_one_vote_refused_with_503_fails_it(tmp_path):
    log = tmp_path / "daphne0-access.log"
    log.write_text("\n".join([AGENT_503, PAGE_200, VOTE_503]) + "\n")

    result = people_refused([log], [step("8/s"), step("4x knee")])

    assert not result["ok"]
    assert result["people's 503s (Daphnes' logs)"] == 1


def test_a_reviewer_page_locust_saw_refused_in_the_4x_step_fails_it(tmp_path):
    log = tmp_path / "daphne0-access.log"
    log.write_text(PAGE_200 + "\n")
    refused = {
        "name": "GET GET / (queue)",
        "error": "HTTPError('503 Server Error: Service Unavailable for url: http://127.0.0.1:8240/')",
        "count": 1,
    }

    result = people_refused([log], [step("8/s"), step("4x knee", [refused])])

    assert not result["ok"]
    assert result["people's 503s by step (locust)"] == {"8/s": 0, "4x knee": 1}
