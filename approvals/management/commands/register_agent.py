"""`manage.py register_agent`: register (or update) an agent and its tokens. Without `--card-url` the
agent is a pull agent (not an A2A server: Reviewer never calls it), and `--audience` is required."""

from django.core.management.base import BaseCommand, CommandError

from approvals.models import Agent
from approvals.services.agents import register_agent
from lib.errors import ServiceError
from lib.tokens import new_token
from tenants.models import Tenant


class Command(BaseCommand):
    help = (
        "Register an agent with Reviewer: an A2A server with --card-url, or a pull agent (MCP gateway, "
        "LangGraph, a script) with --audience and no card URL. Tokens not given are generated and printed "
        "once; Reviewer stores only their sha256."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--slug", required=True, help="agent slug (its push URL is /a2a/push/<slug>/)")
        parser.add_argument("--name", required=True)
        parser.add_argument("--card-url", default="", help="the agent card URL (none: a pull agent)")
        parser.add_argument(
            "--audience",
            default="",
            help="aud of its decisions, the agent's own (default: the card URL; required without one)",
        )
        parser.add_argument("--push-token", help="token its pushes carry in X-A2A-Notification-Token")
        parser.add_argument("--api-token", help="its bearer token for /api/v1/")
        parser.add_argument(
            "--outbound-bearer", default="", help="bearer token Reviewer presents when it calls the agent"
        )
        parser.add_argument(
            "--approval-extension",
            choices=Agent.ApprovalExtension.values,
            default=Agent.ApprovalExtension.REVIEWER,
            help="the A2A approval extension the agent speaks (a2a-rust: Reviewer is its approver)",
        )

    def handle(self, *args, **options):
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}; create it in the admin first")
        push_token = options["push_token"] or new_token()
        api_token = options["api_token"] or new_token()
        bearer = options["outbound_bearer"]
        try:
            agent = register_agent(
                tenant=tenant,
                slug=options["slug"],
                name=options["name"],
                card_url=options["card_url"],
                audience=options["audience"],
                push_token=push_token,
                api_token=api_token,
                outbound_auth_scheme=Agent.AuthScheme.BEARER if bearer else Agent.AuthScheme.NONE,
                outbound_auth_credentials=bearer,
                approval_extension=options["approval_extension"],
            )
        except ServiceError as error:  # e.g. the slug belongs to another tenant's agent
            raise CommandError(error.message) from error
        self.stdout.write(f"registered agent {agent.slug} in {tenant.slug}")
        self.stdout.write(f"  delivery:  {agent.delivery}")
        self.stdout.write(f"  audience:  {agent.audience}")
        if not agent.is_pull:  # a pull agent pushes nothing: no push URL, no push token to give it
            self.stdout.write(f"  push URL:  /a2a/push/{agent.slug}/  (header X-A2A-Notification-Token)")
            if not options["push_token"]:
                self.stdout.write(f"  push token (shown once): {push_token}")
        if not options["api_token"]:
            self.stdout.write(f"  API token (shown once):  {api_token}")
