"""R8: a refused sign-in takes the same time whatever was wrong, so a guesser cannot tell a right password
from a wrong one by the clock.

    .venv/bin/python bench/r8_sign_in_refusals.py        # scratch database $BENCH_DB_PREFIX + bench_sign_in

Not a test: it prints numbers. One person with a password (the production hasher, PBKDF2) and an
authenticator; the sign-in form posted over HTTP to a Daphne on loopback, as a browser does (the page
first, for its CSRF token and cookie), in turns: a wrong password, the right password with a wrong code,
an unknown name. Only the POST is timed. Each attempt comes from a loopback address of its own
(127.0.x.y), so no limit refuses it early (a refusal by a limit checks nothing and is faster for every
kind alike). The baseline is the fastest kind's median; the row is the slowest kind's median
against it (target ≤ 1.2x: before each path cost one password hash, a wrong password cost two, 1.9x).
"""

import re
import statistics
import time

import httpx

from bench.common import ms, scratch_environment, setup_django, spread, stop_process
from bench.r3_intake_http import free_port, start_daphne

ROUNDS = 40
RIGHT_PASSWORD = "a right password 1"  # noqa: S105 (a scratch database's person)


def attempt(url: str, address: str, username: str, password: str) -> float:
    """The page, then the timed POST, from `address`; the POST's seconds."""
    transport = httpx.HTTPTransport(local_address=address)
    with httpx.Client(base_url=url, transport=transport, timeout=30) as client:
        page = client.get("/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
        started = time.perf_counter()
        answer = client.post(
            "/accounts/login/",
            data={
                "csrfmiddlewaretoken": token,
                "username": username,
                "password": password,
                "otp_token": "000000",
            },
            headers={"Referer": f"{url}/accounts/login/"},
        )
        seconds = time.perf_counter() - started
    assert answer.status_code == 400, answer.status_code
    return seconds


def main() -> list[dict]:
    environment = scratch_environment("bench_sign_in")
    setup_django(environment)
    from django.contrib.auth import get_user_model
    from django_otp.plugins.otp_totp.models import TOTPDevice

    from tenants.models import Tenant, TenantMembership

    tenant = Tenant.objects.create(slug="bench", name="Bench")
    person = get_user_model().objects.create_user("pat", password=RIGHT_PASSWORD)
    TenantMembership.objects.create(tenant=tenant, user=person)
    TOTPDevice.objects.create(user=person, name="default", confirmed=True)

    kinds = {
        "wrong password": ("pat", "a wrong password 1"),
        "right password, wrong code": ("pat", RIGHT_PASSWORD),
        "unknown name": ("nobody-here", "a wrong password 1"),
    }
    samples: dict[str, list[float]] = {kind: [] for kind in kinds}
    port = free_port()
    server = start_daphne(environment, port)
    try:
        for round_number in range(ROUNDS):
            order = list(kinds) if round_number % 2 == 0 else list(reversed(kinds))  # drift hits every kind
            for number, kind in enumerate(order):
                address = f"127.0.{round_number + 1}.{number + 1}"
                samples[kind].append(attempt(f"http://127.0.0.1:{port}", address, *kinds[kind]))
    finally:
        stop_process(server)
    medians = {kind: statistics.median(values) for kind, values in samples.items()}
    fastest = min(medians, key=lambda kind: medians[kind])
    slowest = max(medians, key=lambda kind: medians[kind])
    # Its spread: the same ratio over each quarter of the rounds, in order.
    quarter = ROUNDS // 4
    quarters = [
        statistics.median(samples[slowest][start : start + quarter])
        / statistics.median(samples[fastest][start : start + quarter])
        for start in range(0, quarter * 4, quarter)
    ]
    return [
        {
            "id": "R8",
            "what": "sign-in refusal: slowest kind's median vs fastest (wrong password, right password "
            "with a wrong code, unknown name)",
            "baseline": f"{fastest} {ms(medians[fastest])}",
            "measured": f"{slowest} {ms(medians[slowest])}",
            "ratio": round(medians[slowest] / medians[fastest], 2),
            "target": "≤ 1.2x",
            "note": ", ".join(f"{kind} {ms(value)}" for kind, value in medians.items())
            + f"; {spread(quarters, label=f'quarters of the {ROUNDS} rounds')}",
        }
    ]


if __name__ == "__main__":
    for row in main():
        print(row)
