"""The load test's knee rule and its drain report (bench/load/checks.py, `make load`): a step is past the
knee when the whole allowed call's p95 is over its bound even though every request's p95 is under its
own, and the report says how much of the run's work the drain settled after the load stopped."""

from bench.load.checks import drain_words, under_knee


def line(name: str, p95_ms: str, requests: int = 100, failures: int = 0) -> dict:
    return {
        "name": name,
        "requests": requests,
        "failures": failures,
        "p50_ms": "10",
        "p95_ms": p95_ms,
        "rps": 1.0,
    }


def stage(call_p95_ms: str) -> dict:
    return {
        "sent": 100,
        "offered": 100,
        "endpoints": [
            line("POST POST /api/v1/proposals (allowed)", "90"),
            line("POST POST /api/v1/decisions/[jti]/consume", "80"),
            line("POST POST /api/v1/decisions/[jti]/outcome", "70"),
            line("CALL allowed call", call_p95_ms),
            line("Aggregated", "90", requests=300),
        ],
    }


def test_a_step_whose_requests_are_each_under_the_bound_but_whose_calls_are_not_is_past_the_knee():
    slow_calls = stage(call_p95_ms="260")

    assert not under_knee(slow_calls, p95_ms=250, call_p95_ms=250)
    assert (slow_calls["p95_ms"], slow_calls["call_p95_ms"]) == (90.0, 260.0)


def test_a_step_whose_requests_and_calls_are_under_their_bounds_is_under_the_knee():
    assert under_knee(stage(call_p95_ms="240"), p95_ms=250, call_p95_ms=250)


def test_the_drain_report_gives_what_it_settled_after_the_load_stopped_as_a_share_of_the_run():
    drain = {
        "seconds": 42.0,
        "proposals": 1000,
        "open_when_load_stopped": 420,
        "settled_after_load_stopped": 400,
        "approved": 10,
        "released": 300,
        "still_open": {"executing": 20},
    }

    words = drain_words(drain)

    assert "420 of 1000 proposals were open when the load stopped" in words
    assert "400 of them (40% of the run's proposals) settled after it" in words
    assert "still open: {'executing': 20}" in words
