"""`manage.py setup_tenant`: scripted set-up of a tenant, its approver groups and its people.

    manage.py setup_tenant acme --name "Acme Payments" \\
        --group finance --group ops:Operations \\
        --role alice:reviewer --role dana:admin \\
        --principal bob:bob@acme.example \\
        --member alice:finance,ops --member dana:admins

or the same as JSON (`--from-file acme.json`; flags given as well are applied after the file):

    {"slug": "acme", "name": "Acme Payments", "default_ttl_seconds": 3600,
     "groups": [{"slug": "finance", "name": "Finance"}, {"slug": "ops"}],
     "members": [{"username": "alice", "role": "reviewer", "principal_id": "alice@acme.example",
                  "groups": ["finance", "ops"]}]}

Additive and idempotent: running it twice changes nothing; it never removes anyone (use the admin).
Every change goes through the services, so it is audited (as `system`). Users must exist unless
`--create-users` is given: each new user gets a generated password, printed once (they change it with
`manage.py changepassword USER`, and enroll an authenticator at their first sign-in). An `admin` is also
put in the tenant's admin group (where the fail-closed tenant default sends proposals no policy matches)
and given the Django admin (`/admin/`) for the tenant.
"""

import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from approvals.services.tenants import (
    add_group_member,
    create_group,
    create_tenant,
    grant_admin_site,
    set_tenant_membership,
    update_tenant,
)
from lib.errors import ServiceError
from tenants.models import ApproverGroup, GroupMembership, Tenant, TenantMembership


@dataclass
class MemberPlan:
    role: str | None = None
    principal_id: str | None = None
    groups: list[str] = field(default_factory=list)


@dataclass
class TenantPlan:
    slug: str
    name: str | None = None
    default_ttl_seconds: int | None = None
    groups: dict[str, str] = field(default_factory=dict)  # slug -> name ("" for the default name)
    members: dict[str, MemberPlan] = field(default_factory=dict)

    def member(self, username: str) -> MemberPlan:
        return self.members.setdefault(username, MemberPlan())


def _pair(value: str, flag: str) -> tuple[str, str]:
    left, sep, right = value.partition(":")
    if not sep or not left.strip() or not right.strip():
        raise CommandError(f"{flag} takes NAME:VALUE, not {value!r}")
    return left.strip(), right.strip()


def plan_from_file(path: str, slug: str | None) -> TenantPlan:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise CommandError(f"cannot read {path}: {error}") from error
    if not isinstance(data, dict):
        raise CommandError(f"{path}: the top level is an object")
    if slug and data.get("slug") and data["slug"] != slug:
        raise CommandError(f"{path} describes tenant {data['slug']!r}, not {slug!r}")
    plan = TenantPlan(
        slug=slug or data.get("slug") or "",
        name=data.get("name"),
        default_ttl_seconds=data.get("default_ttl_seconds"),
    )
    for group in data.get("groups", []):
        if isinstance(group, str):
            group = {"slug": group}
        if not isinstance(group, dict) or "slug" not in group:
            raise CommandError(f'{path}: each group is a slug or {{"slug": ..., "name": ...}}')
        plan.groups[group["slug"]] = group.get("name", "")
    for member in data.get("members", []):
        if not isinstance(member, dict) or "username" not in member:
            raise CommandError(f"{path}: each member is an object with a username")
        unknown = set(member) - {"username", "role", "principal_id", "groups"}
        if unknown:
            raise CommandError(f"{path}: unknown member keys {sorted(unknown)}")
        entry = plan.member(member["username"])
        entry.role = member.get("role", entry.role)
        entry.principal_id = member.get("principal_id", entry.principal_id)
        entry.groups += list(member.get("groups", []))
    return plan


def new_password() -> str:
    """Sixteen URL-safe characters, never starting with "-" (it would read as an option)."""
    while True:
        password = secrets.token_urlsafe(12)
        if not password.startswith("-"):
            return password


class Command(BaseCommand):
    help = "Create or extend a tenant with approver groups, members, roles and principal ids (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("slug", nargs="?", help="tenant slug (or give it in --from-file)")
        parser.add_argument("--name", help="display name of the tenant")
        parser.add_argument(
            "--ttl",
            type=int,
            dest="default_ttl_seconds",
            help="default time to live of a proposal, in seconds",
        )
        parser.add_argument(
            "--group",
            action="append",
            default=[],
            metavar="SLUG[:NAME]",
            help="an approver group (repeatable)",
        )
        parser.add_argument(
            "--role",
            action="append",
            default=[],
            metavar="USER:ROLE",
            help="reviewer (the default), compliance or admin (repeatable)",
        )
        parser.add_argument(
            "--principal",
            action="append",
            default=[],
            metavar="USER:PRINCIPAL_ID",
            help="the id agents use for this person as principal.id (repeatable)",
        )
        parser.add_argument(
            "--member",
            action="append",
            default=[],
            metavar="USER:GROUP[,GROUP...]",
            help="put a user in approver groups (repeatable)",
        )
        parser.add_argument("--from-file", metavar="JSON", help="read the same from a JSON file first")
        parser.add_argument(
            "--create-users",
            action="store_true",
            help="create users that do not exist yet (each gets a generated password, printed once)",
        )

    def handle(self, *args, **options):
        plan = self.plan(options)
        with transaction.atomic():  # all or nothing: a typo half-way leaves no half-configured tenant
            tenant = self.apply_tenant(plan)
            self.apply_groups(tenant, plan)
            self.apply_members(tenant, plan, create_users=options["create_users"])
        self.stdout.write(self.style.SUCCESS(f"tenant {tenant.slug} is set up"))

    def plan(self, options) -> TenantPlan:
        plan = (
            plan_from_file(options["from_file"], options["slug"])
            if options["from_file"]
            else TenantPlan(slug=options["slug"] or "")
        )
        if not plan.slug:
            raise CommandError('name the tenant: setup_tenant SLUG, or "slug" in the file')
        if options["name"]:
            plan.name = options["name"]
        if options["default_ttl_seconds"] is not None:
            plan.default_ttl_seconds = options["default_ttl_seconds"]
        for value in options["group"]:
            slug, _, name = value.partition(":")
            plan.groups[slug.strip()] = name.strip()
        for value in options["role"]:
            username, role = _pair(value, "--role")
            if role not in TenantMembership.Role.values:
                roles = ", ".join(TenantMembership.Role.values)
                raise CommandError(f"--role {value!r}: the role is one of {roles}")
            plan.member(username).role = role
        for value in options["principal"]:
            username, principal_id = _pair(value, "--principal")
            plan.member(username).principal_id = principal_id
        for value in options["member"]:
            username, groups = _pair(value, "--member")
            plan.member(username).groups += [g.strip() for g in groups.split(",") if g.strip()]
        return plan

    def apply_tenant(self, plan: TenantPlan) -> Tenant:
        tenant = Tenant.objects.filter(slug=plan.slug).first()
        try:
            if tenant is None:
                tenant = create_tenant(
                    slug=plan.slug,
                    name=plan.name or plan.slug,
                    default_ttl_seconds=plan.default_ttl_seconds or 3600,
                )
                admin_group = tenant.admin_group.slug if tenant.admin_group else "none"
                self.stdout.write(f"created tenant {tenant.slug} (admin group: {admin_group})")
            elif plan.name or plan.default_ttl_seconds:
                tenant = update_tenant(tenant, name=plan.name, default_ttl_seconds=plan.default_ttl_seconds)
        except ServiceError as error:
            raise CommandError(f"tenant {plan.slug}: {error.message}") from error
        return tenant

    def apply_groups(self, tenant: Tenant, plan: TenantPlan) -> None:
        for slug, name in plan.groups.items():
            if ApproverGroup.objects.filter(tenant=tenant, slug=slug).exists():
                continue
            try:
                create_group(tenant, slug=slug, name=name)
            except ServiceError as error:
                raise CommandError(f"group {slug}: {error.message}") from error
            self.stdout.write(f"created group {slug}")

    def apply_members(self, tenant: Tenant, plan: TenantPlan, *, create_users: bool) -> None:
        users = get_user_model().objects
        for username, wanted in plan.members.items():
            user = users.filter(username=username).first()
            if user is None:
                if not create_users:
                    raise CommandError(f"no user {username!r} (create it first, or pass --create-users)")
                password = new_password()
                user = users.create_user(username=username, password=password)
                self.stdout.write(f"created user {username}, password (shown once): {password}")
            current = TenantMembership.objects.filter(tenant=tenant, user=user).first()
            role = wanted.role or (current.role if current else TenantMembership.Role.REVIEWER)
            principal_id = (
                wanted.principal_id
                if wanted.principal_id is not None
                else (current.principal_id if current else "")
            )
            try:
                set_tenant_membership(tenant, user, role=role, principal_id=principal_id)
                for slug in wanted.groups:
                    group = ApproverGroup.objects.filter(tenant=tenant, slug=slug).first()
                    if group is None:
                        raise CommandError(f"{username}: no group {slug!r} (add it with --group {slug})")
                    add_group_member(group, user)
                if role == TenantMembership.Role.ADMIN:
                    # The fail-closed default routes to the admin group: an admin who is not in it
                    # could not decide what no policy matches. And an admin configures in /admin/.
                    if tenant.admin_group is None:
                        raise CommandError(f"{tenant.slug} has no admin group: choose one in /admin/ first")
                    add_group_member(tenant.admin_group, user)
                    grant_admin_site(tenant, user)
            except ServiceError as error:
                raise CommandError(f"{username}: {error.message}") from error
            self.stdout.write(_what_they_are(tenant, user, role, principal_id))


def _what_they_are(tenant: Tenant, user, role: str, principal_id: str) -> str:
    """What the person is now, read back from the database, not from the command line: "dana: admin;
    groups: admins; uses /admin/" (an admin is also put in the admins group and given the admin site)."""
    user.refresh_from_db(fields=["is_staff"])
    groups = GroupMembership.objects.filter(group__tenant=tenant, user=user).values_list(
        "group__slug", flat=True
    )
    principal = f" (principal {principal_id})" if principal_id else ""
    admin_site = "; uses /admin/" if user.is_staff else ""
    return (
        f"{user.get_username()}: {role}{principal}; groups: {', '.join(sorted(groups)) or 'none'}{admin_site}"
    )
