"""What the pages tell browsers. Reviewer and audit pages are never cached
(Cache-Control: no-store); every page carries a Content-Security-Policy that allows no inline script;
and the production settings (DEBUG=false) redirect to https, send HSTS, trust the proxy's
X-Forwarded-Proto, and pass `manage.py check --deploy` with no warning."""

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from audit.chain.sequencer import sequence_pending
from tests import factories
from tests.factories import submit, verified_client

pytestmark = pytest.mark.django_db

ROOT = Path(settings.BASE_DIR)


def csp_directives(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    directives = {}
    for part in header.split(";"):
        name, *values = part.split()
        directives[name] = values
    return directives


@pytest.fixture
def pages(agent, refund_policy, requester, reviewer_a, tenant):
    """The reviewer and audit pages a signed-in reviewer opens: queue, watching, a proposal, its edit
    form, and the tenant's audit trail."""
    proposal = submit(agent)
    return [
        reverse("approvals:queue"),
        reverse("approvals:watching"),
        reverse("approvals:detail", args=[proposal.id]),
        reverse("approvals:edit", args=[proposal.id]),
        reverse("audit:tenant", args=[tenant.slug]),
        reverse("audit:events", args=[tenant.slug]),
    ]


def test_reviewer_and_audit_pages_are_never_stored_by_a_browser_or_proxy(pages, reviewer_a, admin_user):
    client = verified_client(admin_user)  # an admin may open the audit pages too
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, url
        cache_control = {part.strip() for part in response["Cache-Control"].split(",")}
        assert {"no-store", "private"} <= cache_control, url


def test_a_refused_decision_is_not_stored_either(pages, reviewer_a):
    response = verified_client(reviewer_a).post(pages[2].rstrip("/") + "/decide", {"action": "approve"})
    assert "no-store" in response["Cache-Control"]


def test_every_page_has_a_policy_with_no_inline_script_and_the_pages_have_none(pages, admin_user):
    client = verified_client(admin_user)
    for url in [*pages, reverse("login"), "/admin/"]:
        response = Client().get(url) if url == reverse("login") else client.get(url)
        policy = csp_directives(response)
        assert policy["script-src"] == ["'self'"], url
        assert policy["default-src"] == ["'self'"] and policy["object-src"] == ["'none'"]
        assert policy["frame-ancestors"] == ["'none'"] and policy["base-uri"] == ["'none'"]
        html = response.content.decode()
        inline = [tag for tag in re.findall(r"<script\b[^>]*>", html) if "src=" not in tag]
        assert not inline, (url, inline)
        assert not re.search(r"\son[a-z]+=", html), url  # no inline event handlers either


def production_env(**extra) -> dict:
    env = {key: value for key, value in os.environ.items() if key not in {"DATABASE_URL", "REDIS_URL"}}
    data = Path(settings.DATA_DIR) / "production-check"
    (data / "keys").mkdir(parents=True, exist_ok=True)
    env.update(
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(60),
        ALLOWED_HOSTS="reviewer.example",
        REVIEWER_ISSUER="https://reviewer.example",
        REVIEWER_SIGNING_KEY_DIR=str(data / "keys"),
        REVIEWER_DATA_DIR=str(data),
        **extra,
    )
    return env


def test_the_production_settings_pass_check_deploy_without_a_warning():
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=production_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


PRODUCTION_REQUESTS = """
from django.test import Client
plain = Client().get("/accounts/login/", HTTP_HOST="reviewer.example")
print("plain", plain.status_code, plain["Location"])
proxied = Client().get("/accounts/login/", HTTP_HOST="reviewer.example", HTTP_X_FORWARDED_PROTO="https")
print("proxied", proxied.status_code, proxied["Strict-Transport-Security"])
print("cookies", proxied.cookies["csrftoken"]["secure"])
"""


def test_with_debug_off_http_is_redirected_and_https_gets_hsts_behind_the_proxy():
    # With DEBUG off the pages name collectstatic's hashed files: a deployment runs it first.
    collected = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput"],
        cwd=ROOT,
        env=production_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert collected.returncode == 0, collected.stderr
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", PRODUCTION_REQUESTS],
        cwd=ROOT,
        env=production_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    printed = [line.split(" ", 1) for line in result.stdout.splitlines()]
    lines = {words[0]: words[1] for words in printed if words[0] in {"plain", "proxied", "cookies"}}
    assert lines["plain"] == "301 https://reviewer.example/accounts/login/"
    assert lines["proxied"] == "200 max-age=31536000; includeSubDomains; preload"
    assert lines["cookies"] == "True"


def test_no_page_has_an_inline_style_and_the_policy_allows_none(pages, admin_user, reviewer_a, tenant):
    """Neither a style attribute nor a <style> block in a page, so the policy can refuse both."""
    factories.approve(factories.make_agent(tenant, slug="charts"), reviewer_a)  # the metrics draw charts
    sequence_pending()  # what the on-commit hook does outside a test's transaction
    client, superuser = verified_client(admin_user), verified_client(factories.policy_admins()[0])
    admin_pages = ["/admin/", "/admin/approvals/proposal/", "/admin/approvals/policy/add/"]
    urls = [(client, url) for url in [*pages, reverse("audit:metrics", args=[tenant.slug]) + "?days=7"]]
    for browser, url in [*urls, *((superuser, url) for url in admin_pages), (Client(), reverse("login"))]:
        response = browser.get(url)
        assert response.status_code == 200, url
        assert "'unsafe-inline'" not in response["Content-Security-Policy"], url
        assert csp_directives(response)["style-src"] == ["'self'"]
        html = response.content.decode()
        assert not re.search(r"\sstyle\s*=", html, re.IGNORECASE), (
            url,
            re.findall(r".{60}\sstyle=.{60}", html),
        )
        assert not re.search(r"<style\b", html, re.IGNORECASE), url
    metrics = client.get(reverse("audit:metrics", args=[tenant.slug]) + "?days=7").content.decode()
    assert '<svg role="img"' in metrics and 'class="chart"' in metrics  # a chart was drawn, without style
