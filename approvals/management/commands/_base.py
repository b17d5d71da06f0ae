"""What the operator commands (halt, resume, rotate_signing_key) share: the scope flags, the operator
named by username, and service refusals turned into a clear CommandError (exit status 1)."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from approvals.models import Agent, Halt
from lib.errors import ServiceError
from tenants.models import Tenant


def add_scope_arguments(parser) -> None:
    scope = parser.add_mutually_exclusive_group(required=True)
    scope.add_argument("--all", action="store_true", help="everything: every tenant and agent")
    scope.add_argument("--tenant", metavar="SLUG", help="one tenant")
    scope.add_argument("--agent", metavar="SLUG", help="one agent")


def scope_from_options(options) -> tuple[str, Tenant | None, Agent | None]:
    if options["tenant"]:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}")
        return Halt.Scope.TENANT, tenant, None
    if options["agent"]:
        agent = Agent.objects.select_related("tenant").filter(slug=options["agent"]).first()
        if agent is None:
            raise CommandError(f"no agent {options['agent']!r}")
        return Halt.Scope.AGENT, None, agent
    return Halt.Scope.GLOBAL, None, None


def describe(tenant: Tenant | None, agent: Agent | None) -> str:
    if tenant:
        return f"tenant {tenant.slug}"
    if agent:
        return f"agent {agent.slug}"
    return "everything"


def scope_flag(tenant: Tenant | None, agent: Agent | None) -> str:
    if tenant:
        return f"--tenant {tenant.slug}"
    if agent:
        return f"--agent {agent.slug}"
    return "--all"


def cancel_note(called: int, stopped: int) -> str:
    """What a command that stopped `stopped` tasks says of their CancelTask: queued for the `called` ones
    of A2A agents, none for a pull agent's (Reviewer never calls a pull agent: no card URL)."""
    if called == stopped:
        return "CancelTask queued for each"
    pull = stopped - called
    return f"CancelTask queued for {called}; none for {pull} of pull agent(s), which Reviewer never calls"


class OperatorCommand(BaseCommand):
    def add_operator_argument(self, parser, doing: str) -> None:
        parser.add_argument(
            "--operator",
            metavar="USERNAME",
            help=f"the person {doing}, recorded as the audit actor (default: system)",
        )

    def operator(self, options):
        username = options.get("operator")
        if not username:
            return None
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r} (--operator names the person acting)")
        return user

    def call_service(self, function, **kwargs):
        try:
            return function(**kwargs)
        except ServiceError as error:
            raise CommandError(error.message) from error
