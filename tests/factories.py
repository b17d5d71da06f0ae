"""make_* factories for tests.

Agents, policy versions, proposals and votes are made through approvals.services, as in production (with
their checks and audit events). Tenants, groups, users, memberships and devices are plain rows written
directly, without the audit events their services would add to every test's chains."""

import time
import uuid
from datetime import UTC, datetime, timedelta
from functools import cache

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django_otp.oath import TOTP
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts.stepup import step_up_for
from approvals.canonical import action_digest
from approvals.models import Policy, PolicyVersion
from approvals.schemas import ProposalSubmission
from approvals.services.agents import register_agent
from approvals.services.intake import submit_proposal
from approvals.services.policies import activate_policy_version, create_policy, create_policy_version
from approvals.services.votes import cast_vote
from tenants.models import ApproverGroup, GroupMembership, Tenant, TenantMembership

PASSWORD = "correct horse battery staple"


@cache
def password_hash(hashers: tuple[str, ...]) -> str:
    """PASSWORD hashed once per hasher setting and given to every user made here: the e2e and browser
    tests keep the real hasher (their servers check the password with it), whose PBKDF2 costs ~0.3 s of
    CPU a user, and a world of seven people was two seconds of each test's setup. The same salt for all
    is harmless in test data; each user still signs in with PASSWORD, checked as deployed."""
    return make_password(PASSWORD)


def make_tenant(slug="acme", name="Acme Payments") -> Tenant:
    tenant = Tenant.objects.create(slug=slug, name=name)
    admins = ApproverGroup.objects.create(tenant=tenant, slug="admins", name="Tenant admins")
    tenant.admin_group = admins
    tenant.save(update_fields=["admin_group"])
    return tenant


def make_group(tenant, slug, name=None) -> ApproverGroup:
    return ApproverGroup.objects.get_or_create(
        tenant=tenant, slug=slug, defaults={"name": name or slug.title()}
    )[0]


def make_user(
    username,
    *,
    tenant=None,
    role=TenantMembership.Role.REVIEWER,
    groups=(),
    principal_id="",
    totp=True,
    first_name="",
):
    user = get_user_model().objects.create_user(
        username=username, password=None, email=f"{username}@example.test", first_name=first_name
    )
    user.password = password_hash(tuple(settings.PASSWORD_HASHERS))
    user.save(update_fields=["password"])
    if tenant is not None:
        TenantMembership.objects.create(tenant=tenant, user=user, role=role, principal_id=principal_id)
        for slug in groups:
            GroupMembership.objects.create(group=make_group(tenant, slug), user=user)
    if totp:
        TOTPDevice.objects.create(user=user, name="default", confirmed=True)
    return user


def totp_code(user) -> str:
    """The code a person's authenticator shows now; if this step's code was already used, the next
    step's code (django-otp accepts one step of drift, and refuses a code it has seen)."""
    return code_of(TOTPDevice.objects.get(user=user, confirmed=True))


def code_of(device) -> str:
    """The code this authenticator (confirmed or being set up) shows now, as totp_code."""
    totp = TOTP(device.bin_key, device.step, device.t0, device.digits, device.drift)
    totp.time = time.time()
    if totp.t() <= device.last_t:
        totp.time += device.step * (device.last_t + 1 - totp.t())
    return f"{totp.token():0{device.digits}d}"


def make_agent(
    tenant,
    slug="refund-demo",
    *,
    push_token="push-secret",
    api_token="api-secret",
    card_url=None,
    audience="",
):
    """An A2A agent; with card_url="" a pull agent (audience urn:agent:<slug> unless given)."""
    # Card URLs are unique per installation: by default each agent has its own.
    if card_url is None:
        card_url = f"http://127.0.0.1:8001/{slug}/.well-known/agent-card.json"
    return register_agent(
        tenant=tenant,
        slug=slug,
        name=slug.replace("-", " ").title(),
        card_url=card_url,
        audience=audience or ("" if card_url else f"urn:agent:{slug}"),
        push_token=push_token,
        api_token=api_token,
    )


def policy_admins():
    """Two superusers outside every tenant: the author of a policy version and the second admin who
    activates it (four eyes). Being in no tenant, they never vote and never see a queue."""
    users = get_user_model().objects
    # No password (nobody logs in as them; tests use force_login): hashing one costs every test time.
    author = users.filter(username="policy-author").first() or users.create_superuser(
        "policy-author", "policy-author@example.test", None
    )
    approver = users.filter(username="policy-approver").first() or users.create_superuser(
        "policy-approver", "policy-approver@example.test", None
    )
    return author, approver


def make_policy(
    tenant,
    slug,
    *,
    outcome=PolicyVersion.Outcome.REQUIRE_APPROVAL,
    tool_pattern="*",
    agent_pattern="*",
    condition="",
    thresholds=None,
    step_up="per_vote",
    ttl_seconds=3600,
    allow_self_approval=False,
    consume_online=True,
    risk="",
    reversibility="",
    target_argument="",
    equivalent_tools=(),
    break_glass=None,
    notifications=None,
    batch=None,
) -> PolicyVersion:
    """An active policy version, written by one admin and activated by another through the services.
    Groups the thresholds name are created if missing (a test names them before adding people)."""
    author, approver = policy_admins()
    thresholds = thresholds if thresholds is not None else [{"group": "finance", "count": 1}]
    for threshold in thresholds:
        make_group(tenant, threshold["group"])
    policy = Policy.objects.filter(tenant=tenant, slug=slug).first() or create_policy(
        tenant, slug=slug, name=slug.replace("-", " "), actor=author
    )
    draft = create_policy_version(
        policy,
        {
            "outcome": outcome,
            "tool_pattern": tool_pattern,
            "agent_pattern": agent_pattern,
            "condition": condition,
            "thresholds": thresholds,
            "step_up": step_up,
            "ttl_seconds": ttl_seconds,
            "allow_self_approval": allow_self_approval,
            "consume_online": consume_online,
            "risk": risk,
            "reversibility": reversibility,
            "target_argument": target_argument,
            "equivalent_tools": list(equivalent_tools),
            **({"break_glass": break_glass} if break_glass else {}),
            **({"notifications": notifications} if notifications else {}),
            **({"batch": batch} if batch else {}),
        },
        actor=author,
    )
    return activate_policy_version(draft, actor=approver)


def refund_action(order_id="1182", amount="40.00", currency="EUR") -> dict:
    return {
        "tool": "payments.refund",
        "arguments": {"order_id": order_id, "amount": amount, "currency": currency},
        "target": f"order:{order_id}",
    }


def approval_request(
    *,
    action=None,
    principal_id="requester",
    request_id=None,
    summary=None,
    expires_at=None,
    supersedes=None,
    **extra,
) -> dict:
    action = action or refund_action()
    request = {
        "request_id": request_id or str(uuid.uuid4()),
        "summary": summary
        or f"Refund {action['arguments'].get('currency', '')} {action['arguments'].get('amount', '')}"
        f" to order {action['arguments'].get('order_id', '')}",
        "action": action,
        "action_digest": action_digest(action),
        "principal": {"id": principal_id, "display": principal_id.title()},
        "agent_version": "refund-agent@1",
        "consequences": {
            "effect": "Money leaves the merchant account",
            "reversible": False,
            "amount": action["arguments"].get("amount"),
        },
        "diff": [
            {"field": "order.refunded_amount", "before": "0.00", "after": action["arguments"].get("amount")}
        ],
        "evidence": [
            {"title": "Support ticket", "url": "https://support.example.test/t/1", "excerpt": "never arrived"}
        ],
        **extra,
    }
    if expires_at:
        request["expires_at"] = expires_at.isoformat()
    if supersedes:
        request["supersedes"] = supersedes
    return request


def submit(agent, *, task_id=None, context_id="ctx-1", **request_kwargs):
    body = {
        "task_id": task_id or f"task-{uuid.uuid4()}",
        "context_id": context_id,
        "request": approval_request(**request_kwargs),
    }
    return submit_proposal(agent, ProposalSubmission.model_validate(body), via="test")[0]


def in_seconds(seconds: int) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def fresh_step_up(user):
    """A step-up with the code the person's authenticator shows now (votes, questions and edits need one)."""
    return step_up_for(user, totp_code(user))


def vote(proposal, person, verdict="approve", **fields):
    """`person` votes on `proposal` as the page would: the digest they see, a code their authenticator
    shows now."""
    return cast_vote(
        proposal.id,
        person,
        verdict=verdict,
        digest_seen=proposal.action_digest,
        step_up=fresh_step_up(person),
        **fields,
    )


def approve(agent, reviewer, **submit_kwargs):
    """Submit a proposal and approve it with one vote (the policy must need just that one).
    Returns (proposal, decision)."""
    from approvals.models import Decision

    proposal = submit(agent, **submit_kwargs)
    vote(proposal, reviewer)
    proposal.refresh_from_db()
    return proposal, Decision.objects.get(proposal=proposal)


def sign_in_verified(client, user):
    """Sign a test client in as if with password and one-time code (the login view has its own tests).
    A user without a device gets one, as enrollment would give them."""
    from django_otp import DEVICE_ID_SESSION_KEY

    device = TOTPDevice.objects.filter(user=user, confirmed=True).first()
    if device is None:
        device = TOTPDevice.objects.create(user=user, name="default", confirmed=True)
    client.force_login(user)
    session = client.session
    session[DEVICE_ID_SESSION_KEY] = device.persistent_id
    session.save()
    return client


def verified_client(user):
    from django.test import Client

    return sign_in_verified(Client(), user)


def subscribe_push_device(user, subscription: dict, name="Alice's phone"):
    """A person's device subscribed to Web Push through the page, as the installed web app does it."""
    import json

    return verified_client(user).post(
        "/push/subscribe", data=json.dumps({**subscription, "name": name}), content_type="application/json"
    )


def clone_waiting(template, count: int, *, batch: int = 5000) -> None:
    """`count` copies of a proposal awaiting review, bulk-inserted with their policy pins (no services,
    no audit events): volume for the queue's flatness test and benchmark, made in seconds. Copies expire
    one second apart after the template and are one millisecond older each, so both lists' orders are
    exercised."""
    from approvals.models import Proposal

    fields = Proposal.objects.filter(pk=template.pk).values().get()
    pins = list(template.policy_versions.values_list("pk", flat=True))
    Pin = Proposal.policy_versions.through
    for start in range(0, count, batch):
        rows = []
        for number in range(start, min(start + batch, count)):
            row = {**fields, "id": uuid.uuid4(), "request_id": f"clone-{template.pk}-{number}"}
            row["expires_at"] = fields["expires_at"] + timedelta(seconds=number + 1)
            row["created_at"] = fields["created_at"] - timedelta(milliseconds=number + 1)
            rows.append(Proposal(**row))
        Proposal.objects.bulk_create(rows)
        Pin.objects.bulk_create(Pin(proposal_id=row.id, policyversion_id=pin) for row in rows for pin in pins)


def trail_name(username: str) -> str:
    """How the audit trail and the decision token name this persona: its pseudonym."""
    from audit.labels import user_label

    return user_label(get_user_model().objects.get(username=username))
