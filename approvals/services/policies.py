"""Configuration: policies and their versions."""

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from approvals import events
from approvals.models import BreakGlassRelease, Policy, PolicyVersion, Proposal
from approvals.policy import batching, break_glass
from approvals.policy.evaluation import (
    active_versions_for,
    context_for_proposal,
    evaluate,
    stricter_requirements,
)
from approvals.policy.step_up import PER_VOTE, validate_step_up
from approvals.policy.validation import VERSION_FIELDS, version_field_errors
from approvals.services.common import proposal_subject
from approvals.services.lifecycle import enqueue_cancel, revoke_proposal, transition
from approvals.services.quorum import count_quorum
from approvals.services.tenants import require_config_admin, require_slug
from approvals.states import ALLOWED, RELEASED, WAITING_FOR_PEOPLE, State
from audit.labels import actor_label, user_label
from audit.models import Verb
from audit.trail import record
from lib.errors import ConfigRefused, Conflict, PolicyInvalid
from tenants.models import ApproverGroup, Tenant, TenantMembership
from tenants.queries import DECIDING_ROLES


def create_policy(tenant: Tenant, *, slug: str, name: str = "", actor=None) -> Policy:
    """A named policy with no version yet (it matches nothing until a version is activated)."""
    require_config_admin(actor, tenant.id)
    require_slug(slug)
    with transaction.atomic():
        if Policy.objects.filter(tenant=tenant, slug=slug).exists():
            raise Conflict("slug_taken", f"the policy {slug!r} exists already", "slug")
        created = Policy.objects.create(tenant=tenant, slug=slug, name=name or slug.replace("-", " "))
        record(
            tenant.id,
            actor=actor_label(actor),
            verb=Verb.POLICY_CREATED,
            subject=f"policy:{slug}",
            data={"slug": slug, "name": created.name},
        )
    return created


POLICY_VERSION_DEFAULTS = {
    "agent_pattern": "*",
    "tool_pattern": "*",
    "condition": "",
    "thresholds": [],
    "step_up": PER_VOTE,
    "ttl_seconds": 3600,
    "allow_self_approval": False,
    "consume_online": True,
    "risk": "",
    "reversibility": "",
    "target_argument": "",
    "equivalent_tools": [],
    "reservation_needs_second": False,
    "break_glass": {},
    "notifications": {},
    "batch": {},
}


def _checked_version_fields(tenant: Tenant, fields: dict) -> dict:
    values = {**POLICY_VERSION_DEFAULTS, **fields}
    group_slugs = set(ApproverGroup.objects.filter(tenant=tenant).values_list("slug", flat=True))
    errors = version_field_errors(values, group_slugs, break_glass_people(tenant.id))
    if errors:
        raise PolicyInvalid(errors)
    values["break_glass"] = break_glass.normalized(values["break_glass"])
    values["batch"] = batching.normalized(values["batch"])
    values["step_up"] = validate_step_up(values["step_up"])
    values["thresholds"] = [{"group": t["group"], "count": t["count"]} for t in values["thresholds"]]
    return values


def break_glass_people(tenant_id) -> set[str]:
    """Who a break-glass rule may name: the tenant's reviewers and admins (compliance staff do not vote)."""
    return set(
        TenantMembership.objects.filter(tenant_id=tenant_id, role__in=DECIDING_ROLES).values_list(
            "user__username", flat=True
        )
    )


def create_policy_version(policy: Policy, fields: dict, *, actor) -> PolicyVersion:
    """Store a new draft version of a policy. Versions are never edited: a change is a new draft, which
    takes effect only when a different admin activates it (activate_policy_version)."""
    if actor is None:
        raise ConfigRefused("author_required", "a policy version needs an author: four eyes are two people")
    require_config_admin(actor, policy.tenant_id)
    with transaction.atomic():
        locked = Policy.objects.select_for_update(of=("self",)).select_related("tenant").get(pk=policy.pk)
        values = _checked_version_fields(locked.tenant, fields)
        latest = locked.versions.order_by("-version").values_list("version", flat=True).first() or 0
        active = locked.active_version
        version = PolicyVersion.objects.create(
            policy=locked, version=latest + 1, status=PolicyVersion.Status.DRAFT, author=actor, **values
        )
        record(
            locked.tenant_id,
            actor=actor_label(actor),
            verb=Verb.POLICY_VERSION_CREATED,
            subject=f"policy:{locked.slug}@{version.version}",
            data={
                "policy": locked.slug,
                "version": version.version,
                "active_version": active.version if active else None,
                **values,
            },
        )
    return version


def activate_policy_version(version: PolicyVersion, *, actor, now: datetime | None = None) -> PolicyVersion:
    """Four eyes: a second admin approves a draft; it becomes the policy's active version and the version
    it replaces is retired, in one transaction. New proposals pin it; open ones keep what they pinned."""
    if actor is None:
        raise ConfigRefused("approver_required", "activating a policy version needs a second admin")
    with transaction.atomic():
        locked_policy = (
            Policy.objects.select_for_update(of=("self",)).select_related("tenant").get(pk=version.policy_id)
        )
        require_config_admin(actor, locked_policy.tenant_id)
        draft = PolicyVersion.objects.select_for_update().get(pk=version.pk)
        if draft.status != PolicyVersion.Status.DRAFT:
            raise Conflict(
                "not_draft", f"version {draft.version} is {draft.status}; only a draft can be activated"
            )
        if draft.author_id is None or draft.author_id == actor.pk:
            raise ConfigRefused(
                "four_eyes", "the author of a policy version cannot activate it; another admin must"
            )
        current = (
            locked_policy.versions.select_for_update().filter(status=PolicyVersion.Status.ACTIVE).first()
        )
        if current is not None and current.version > draft.version:
            raise Conflict(
                "stale_draft",
                f"version {current.version} is active and newer than this draft; write a new draft from it",
            )
        # Groups may have changed since the draft was written: it must still name only existing ones.
        _checked_version_fields(locked_policy.tenant, {name: getattr(draft, name) for name in VERSION_FIELDS})
        if current is not None:
            current.status = PolicyVersion.Status.RETIRED
            current.save(update_fields=["status"])
        draft.status = PolicyVersion.Status.ACTIVE
        draft.activated_by = actor
        draft.activated_at = now or timezone.now()
        draft.save(update_fields=["status", "activated_by", "activated_at"])
        record(
            locked_policy.tenant_id,
            actor=actor_label(actor),
            verb=Verb.POLICY_VERSION_ACTIVATED,
            subject=f"policy:{locked_policy.slug}@{draft.version}",
            data={
                "policy": locked_policy.slug,
                "version": draft.version,
                "author": user_label(draft.author) if draft.author else None,
                "retired": current.version if current else None,
            },
        )
        _reevaluate_open_proposals(
            locked_policy.tenant,
            actor=actor_label(actor),
            because=f"policy {locked_policy.slug}@{draft.version} activated",
        )
    draft.policy = locked_policy
    return draft


def _reevaluate_open_proposals(tenant: Tenant, *, actor: str, because: str) -> None:
    """A policy change while proposals wait never loosens them, and stops what it now forbids.

    Waiting proposals: a deny now cancels them (the agent's task is cancelled); stricter requirements
    are merged in (more approvals, stricter step-up), so the change routes them to the right people;
    a looser policy changes nothing. Released, unconsumed decisions: a deny, or requirements the
    recorded approvals no longer meet, revoke them."""
    open_states = [*WAITING_FOR_PEOPLE, *RELEASED]
    versions = active_versions_for(tenant)
    for proposal in (
        Proposal.objects.select_for_update(of=("self",))
        .select_related("agent", "tenant")
        .filter(tenant=tenant, state__in=open_states)
        .order_by("pk")
    ):
        evaluation = evaluate(tenant, versions, context_for_proposal(proposal))
        if evaluation.outcome == "allow":
            continue
        if evaluation.outcome == "deny":
            reason = f"{because}: {evaluation.reason}"
            if proposal.state in RELEASED:
                revoke_proposal(proposal, actor=actor, reason=reason)
            elif State.CANCELLED in ALLOWED[proposal.state]:
                transition(proposal, State.CANCELLED, actor=actor, reason=reason)
                enqueue_cancel(proposal, reason=reason)
            continue
        merged = stricter_requirements(proposal.requirements, evaluation.requirements)
        if proposal.state == State.ALLOWED or (
            proposal.state == State.APPROVED
            and not count_quorum(proposal, merged).met
            # A break-glass release stands on its own rule, not the quorum (a deny above still revokes it).
            and not BreakGlassRelease.objects.filter(proposal=proposal).exists()
        ):
            revoke_proposal(
                proposal, actor=actor, reason=f"{because}: the release no longer meets the policy"
            )
            continue
        if merged == proposal.requirements:
            continue
        proposal.requirements = merged
        proposal.save(update_fields=["requirements"])
        proposal.policy_versions.add(*evaluation.versions)
        record(
            proposal.tenant_id,
            actor=actor,
            verb=Verb.POLICY_EVALUATED,
            subject=proposal_subject(proposal),
            data={
                "outcome": "require_approval",
                "reevaluated": True,
                "reason": because,
                "policies": [v.ref for v in evaluation.versions],
                "requirements": merged,
            },
        )
        events.proposal_changed(proposal)
