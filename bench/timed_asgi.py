"""Reviewer's ASGI app for benchmarks only: every HTTP request's time inside the app, from the call to
the last body message of its response, appended as `start end method path` (wall-clock seconds) to the
file BENCH_TIMINGS_FILE names. A row can then say how much of an agent's call Reviewer's process spent
and how much was the agent's, a2a-sdk's and the network's (bench/delivery_stack.py
`time_inside_reviewer`). Never used by the product."""

import os
import time

from reviewer.asgi import application as reviewer_application

_timings = open(os.environ["BENCH_TIMINGS_FILE"], "a", buffering=1)  # noqa: SIM115 (the process's life)


async def application(scope, receive, send):
    if scope["type"] != "http":
        return await reviewer_application(scope, receive, send)
    start = time.time()

    async def timed_send(message):
        await send(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            _timings.write(f"{start:.6f} {time.time():.6f} {scope['method']} {scope['path']}\n")

    return await reviewer_application(scope, receive, timed_send)
