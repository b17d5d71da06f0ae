"""`manage.py policy`: write policy drafts from JSON and activate them with a second admin.

    manage.py policy draft --tenant acme --file refunds.json --author alice
    manage.py policy dry-run --tenant acme --policy refunds --version 2
    manage.py policy activate --tenant acme --policy refunds --version 2 --approver bob --code 123456
    manage.py policy show --tenant acme

The file holds one version (fields as in the admin; only "outcome" is required):

    {"policy": "refunds", "name": "Refunds", "tool_pattern": "payments.refund", "agent_pattern": "*",
     "condition": "double(args.amount) > 500.0", "outcome": "require_approval",
     "thresholds": [{"group": "finance", "count": 1}, {"group": "ops", "count": 2}],
     "step_up": "per_vote", "ttl_seconds": 3600, "allow_self_approval": false, "risk": "high",
     "break_glass": {"people": ["riley"], "per_week": 3, "amount_cap": "500.00", "currency": "EUR",
                     "review_hours": 24}}

Four eyes hold here as in the admin: the approver must be another admin of the tenant than the author,
and proves it is them with a fresh one-time code from their own authenticator (`--code`, or typed at
the prompt): whoever runs the command cannot activate in another admin's name.
"""

import getpass
import json
import sys
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from accounts.stepup import verify_code
from approvals.models import Policy, PolicyVersion
from approvals.policy.dry_run import dry_run as replay_draft
from approvals.policy.dry_run import recent_proposals
from approvals.services.policies import activate_policy_version, create_policy, create_policy_version
from lib.errors import PolicyInvalid, ServiceError
from tenants.models import Tenant


class Command(BaseCommand):
    help = "Draft a policy version from a JSON file, dry-run it, or activate it as a second admin."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, metavar="draft|dry-run|activate|show")

        draft = actions.add_parser("draft", help="store a new draft version from a JSON file")
        draft.add_argument("--tenant", required=True)
        draft.add_argument("--file", required=True, help="JSON object with the version's fields")
        draft.add_argument("--policy", help='policy slug (default: "policy" in the file)')
        draft.add_argument("--author", required=True, help="username of the admin writing it")

        activate = actions.add_parser("activate", help="approve and activate a draft (not its author)")
        activate.add_argument("--tenant", required=True)
        activate.add_argument("--policy", required=True)
        activate.add_argument("--version", type=int, required=True)
        activate.add_argument("--approver", required=True, help="username of the second admin")
        activate.add_argument(
            "--code",
            help="the approver's current one-time code (or backup code); asked for when not given",
        )

        dry_run = actions.add_parser("dry-run", help="replay the last 100 proposals against a draft")
        dry_run.add_argument("--tenant", required=True)
        dry_run.add_argument("--policy", required=True)
        dry_run.add_argument("--version", type=int, required=True)

        show = actions.add_parser("show", help="list policies and their versions")
        show.add_argument("--tenant", required=True)

    def handle(self, *args, **options):
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}")
        action = options["action"]
        try:
            if action == "draft":
                self.draft(tenant, options)
            elif action == "activate":
                self.activate(tenant, options)
            elif action == "dry-run":
                self.dry_run(tenant, options)
            else:
                self.show(tenant)
        except PolicyInvalid as error:
            raise CommandError(
                "the draft is not valid:\n"
                + "\n".join(f"  {name}: {text}" for name, text in error.errors.items())
            ) from error
        except ServiceError as error:
            raise CommandError(error.message) from error

    def _user(self, username: str):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        return user

    def _version(self, tenant: Tenant, options) -> PolicyVersion:
        version = (
            PolicyVersion.objects.select_related("policy__tenant")
            .filter(policy__tenant=tenant, policy__slug=options["policy"], version=options["version"])
            .first()
        )
        if version is None:
            raise CommandError(f"no version {options['version']} of {tenant.slug}/{options['policy']}")
        return version

    def draft(self, tenant: Tenant, options) -> None:
        try:
            data = json.loads(Path(options["file"]).read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise CommandError(f"cannot read {options['file']}: {error}") from error
        if not isinstance(data, dict):
            raise CommandError("the file holds one JSON object")
        slug = options["policy"] or data.get("policy")
        if not slug:
            raise CommandError('name the policy: --policy, or "policy" in the file')
        name = data.get("name", "")
        fields = {key: value for key, value in data.items() if key not in {"policy", "name"}}
        author = self._user(options["author"])
        target = Policy.objects.filter(tenant=tenant, slug=slug).first()
        if target is None:
            target = create_policy(tenant, slug=slug, name=name, actor=author)
            self.stdout.write(f"created policy {target}")
        version = create_policy_version(target, fields, actor=author)
        self.stdout.write(
            self.style.SUCCESS(
                f"draft {version} stored; another admin activates it with:\n"
                f"  manage.py policy activate --tenant {tenant.slug} --policy {slug} "
                f"--version {version.version} --approver <username> (with that admin's one-time code)"
            )
        )

    def activate(self, tenant: Tenant, options) -> None:
        approver = self._user(options["approver"])
        code = options.get("code")
        if not code:
            if not sys.stdin.isatty():
                raise CommandError(f"--code: {approver.get_username()}'s current one-time code is required")
            code = getpass.getpass(f"{approver.get_username()}'s one-time code: ")
        if verify_code(approver, code) is None:
            raise CommandError(
                f"--code: not a valid one-time code of {approver.get_username()} (wrong, used or expired): "
                "the approving admin gives their own current code"
            )
        version = activate_policy_version(self._version(tenant, options), actor=approver)
        self.stdout.write(self.style.SUCCESS(f"{version} is active"))

    def dry_run(self, tenant: Tenant, options) -> None:
        draft = self._version(tenant, options)
        rows = replay_draft(draft, recent_proposals(tenant))
        for row in rows:
            mark = "match" if row.draft_matches else "-----"
            change = f"{row.outcome_now} -> {row.outcome_with_draft}" if row.changes else row.outcome_now
            when = f"{row.proposal.created_at:%Y-%m-%d %H:%M}"
            self.stdout.write(f"{mark}  {when}  {row.proposal.tool:<30} {change}")
        matched = sum(1 for row in rows if row.draft_matches)
        changed = sum(1 for row in rows if row.changes)
        self.stdout.write(
            f"{len(rows)} proposals; the draft matches {matched}; "
            f"changes (outcome or required approvals): {changed}"
        )

    def show(self, tenant: Tenant) -> None:
        for item in Policy.objects.filter(tenant=tenant).order_by("slug"):
            self.stdout.write(f"{item.slug}  {item.name}")
            for version in item.versions.order_by("version"):
                self.stdout.write(
                    f"  v{version.version}  {version.status:<8} {version.outcome:<17} "
                    f"agent={version.agent_pattern} tool={version.tool_pattern} "
                    f"condition={version.condition or '-'} thresholds={version.thresholds}"
                    + (f" break_glass={json.dumps(version.break_glass)}" if version.break_glass else "")
                )
