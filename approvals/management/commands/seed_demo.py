"""`manage.py seed_demo`: the demo tenant, its people, policies and the demo refund agent. Idempotent.

Everything goes through the services, so the demo's audit trail starts with its own set-up. Each run
gives every demo person a new password and the agent new tokens (Reviewer keeps only hashes, so the
only way to show them is to make them now); authenticators already set up are kept.
"""

import secrets
import time

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from django_otp.oath import TOTP
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts.devices import confirm_totp_enrollment, start_totp_enrollment
from approvals.models import Policy, PolicyVersion
from approvals.services.agents import register_agent
from approvals.services.policies import activate_policy_version, create_policy, create_policy_version
from approvals.services.tenants import (
    add_group_member,
    create_group,
    create_tenant,
    grant_admin_site,
    set_tenant_membership,
)
from lib.tokens import new_token
from tenants.models import ApproverGroup, Tenant, TenantMembership

TENANT = "demo"
AGENT_SLUG = "refund-demo"
# (username, full name, role, groups, principal id). The requester is Casey Ortiz, the principal the demo
# client names in most of its requests (examples/demo_client.py): she sits in finance, and still cannot
# approve her own refunds.
PEOPLE = [
    ("reviewer1", "Riley Finch", TenantMembership.Role.REVIEWER, ["finance", "ops"], ""),
    ("reviewer2", "Morgan Diaz", TenantMembership.Role.REVIEWER, ["finance"], ""),
    ("requester", "Casey Ortiz", TenantMembership.Role.REVIEWER, ["finance"], "cust-ops-7"),
    ("demo-admin", "Alex Admin", TenantMembership.Role.ADMIN, ["admins"], ""),
    ("demo-admin2", "Jamie Second-Admin", TenantMembership.Role.ADMIN, ["admins"], ""),
    ("auditor", "Pat Compliance", TenantMembership.Role.COMPLIANCE, [], ""),
]
# Riley may release a refund alone in an emergency: up to EUR 2,000.00, three times a week.
DEMO_BREAK_GLASS = {
    "people": ["reviewer1"],
    "per_week": 3,
    "amount_cap": "2000.00",
    "currency": "EUR",
    "review_hours": 24,
}
POLICIES = [
    (
        "refunds",
        "Refunds",
        {
            "tool_pattern": "payments.refund",
            "outcome": PolicyVersion.Outcome.REQUIRE_APPROVAL,
            "thresholds": [{"group": "finance", "count": 1}],
            "step_up": "per_vote",
            "ttl_seconds": 24 * 3600,
            "risk": "medium",
            "break_glass": DEMO_BREAK_GLASS,
        },
    ),
    (
        "large-refunds",
        "Refunds above 500",
        {
            "tool_pattern": "payments.refund",
            "condition": "double(args.amount) > 500.0",
            "outcome": PolicyVersion.Outcome.REQUIRE_APPROVAL,
            "thresholds": [{"group": "finance", "count": 2}],
            "step_up": "per_vote",
            "ttl_seconds": 24 * 3600,
            "risk": "high",
            "break_glass": DEMO_BREAK_GLASS,
        },
    ),
]


def seconds_left(device: TOTPDevice, now: float | None = None) -> int:
    """How long the code current_code() gives stays the one an authenticator shows: to the end of its
    time step (a code already used is the next step's, shown a step later)."""
    now = time.time() if now is None else now
    step_index = int((now - device.t0) // device.step)
    ends = device.t0 + (step_index + 1) * device.step
    if step_index <= device.last_t:
        ends += device.step * (device.last_t + 1 - step_index)
    return max(int(ends - now), 1)


def current_code(device: TOTPDevice) -> str:
    """The code an authenticator app shows now; the next step's if this one was already used."""
    totp = TOTP(device.bin_key, device.step, device.t0, device.digits, device.drift)
    totp.time = time.time()
    if totp.t() <= device.last_t:
        totp.time += device.step * (device.last_t + 1 - totp.t())
    return f"{totp.token():0{device.digits}d}"


class Command(BaseCommand):
    help = "Create (or refresh) the demo tenant, people, policies and refund agent; print how to sign in."

    def add_arguments(self, parser):
        parser.add_argument(
            "--agent-url", default="http://127.0.0.1:8001", help="the demo refund agent's base URL"
        )
        parser.add_argument("--push-token", help="the agent's push token (default: generated)")
        parser.add_argument("--api-token", help="the agent's API token (default: generated)")
        parser.add_argument(
            "--password", help="one password for every demo person (default: one each, generated)"
        )
        parser.add_argument(
            "--quiet", action="store_true", help="print nothing (run_demo prints its own summary)"
        )

    def handle(self, *args, agent_url, push_token, api_token, password, quiet, **options):
        with transaction.atomic():
            tenant = Tenant.objects.filter(slug=TENANT).first() or create_tenant(
                slug=TENANT, name="Demo Payments"
            )
            for slug in ("finance", "ops"):
                if not ApproverGroup.objects.filter(tenant=tenant, slug=slug).exists():
                    create_group(tenant, slug=slug, name=slug.title())
            people = {
                username: self._person(
                    tenant, username, name, role, groups, principal_id, password or secrets.token_urlsafe(9)
                )
                for username, name, role, groups, principal_id in PEOPLE
            }
            self._policies(tenant, author=people["demo-admin"][0], approver=people["demo-admin2"][0])
            push_token, api_token = push_token or new_token(), api_token or new_token()
            agent = register_agent(
                tenant=tenant,
                slug=AGENT_SLUG,
                name="Refund agent (demo)",
                card_url=f"{agent_url.rstrip('/')}/.well-known/agent-card.json",
                push_token=push_token,
                api_token=api_token,
            )
        self.seeded = {
            "tenant": tenant,
            "agent": agent,
            "people": people,
            "push_token": push_token,
            "api_token": api_token,
        }
        if not quiet:
            self.print_summary(self.seeded)

    def _person(self, tenant, username, full_name, role, groups, principal_id, password):
        first, _, last = full_name.partition(" ")
        user, created = get_user_model().objects.get_or_create(
            username=username,
            defaults={"first_name": first, "last_name": last, "email": f"{username}@demo.test"},
        )
        user.set_password(password)
        if username == "demo-admin":
            user.is_staff = user.is_superuser = True
        user.save()
        set_tenant_membership(tenant, user, role=role, principal_id=principal_id)
        for slug in groups:
            add_group_member(ApproverGroup.objects.get(tenant=tenant, slug=slug), user)
        if role == TenantMembership.Role.ADMIN and not user.is_superuser:
            # The second admin activates what the first drafts (four eyes): in the browser, too.
            grant_admin_site(tenant, user)
        device = TOTPDevice.objects.filter(user=user, confirmed=True).first()
        if device is None:
            start_totp_enrollment(user)
            device, _ = confirm_totp_enrollment(
                user, code=current_code(TOTPDevice.objects.get(user=user, confirmed=False))
            )
        return user, password, device

    def _policies(self, tenant, *, author, approver):
        for slug, name, fields in POLICIES:
            policy = Policy.objects.filter(tenant=tenant, slug=slug).first() or create_policy(
                tenant, slug=slug, name=name, actor=author
            )
            if policy.active_version is None:
                draft = create_policy_version(policy, fields, actor=author)
                activate_policy_version(draft, actor=approver)

    def print_summary(self, seeded):
        write = self.stdout.write
        write(
            f"Tenant {seeded['tenant'].slug!r}: policies refunds (1 finance approval) and large-refunds "
            "(2 finance approvals above 500), a fresh code per vote."
        )
        write("People (password, then the authenticator URI to scan or paste; codes: manage.py totp_code):")
        for username, _, role, groups, principal_id in PEOPLE:
            user, password, device = seeded["people"][username]
            extra = f", principal {principal_id}" if principal_id else ""
            write(
                f"  {username:<12} {password:<14} {role}{' in ' + ', '.join(groups) if groups else ''}{extra}"
            )
            write(f"      {device.config_url}")
        write(f"Agent {seeded['agent'].slug}: card {seeded['agent'].card_url}")
        write(f"  push token: {seeded['push_token']}")
        write(f"  API token:  {seeded['api_token']}")
        write("Current one-time codes: python manage.py totp_code " + " ".join(u for u, *_ in PEOPLE))
