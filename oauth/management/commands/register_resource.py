"""`manage.py register_resource`: register (or update) a protected resource: the agent registration it
consumes and reports with (pull, audience = the resource's identifier) and the keys and RAR types of
its transaction authorization challenges (docs/protect-an-api.md)."""

import json
from pathlib import Path
from typing import Any

import httpx
from django.core.management.base import BaseCommand, CommandError, CommandParser

from lib.errors import ServiceError
from lib.tokens import new_token
from oauth.services import register_resource
from tenants.models import Tenant


class Command(BaseCommand):
    help = (
        "Register a protected resource: its challenge-signing public key (a JWK or JWK Set file, or a "
        "JWKS URL fetched now) and its authorization_details types, each mapped to a tool. Prints the "
        "resource's API token once (Reviewer stores only its sha256)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--slug", required=True, help="the resource's slug (its agent registration)")
        parser.add_argument("--name", required=True)
        parser.add_argument(
            "--audience", required=True, help="the resource's identifier: its challenges' iss"
        )
        keys = parser.add_mutually_exclusive_group(required=True)
        keys.add_argument("--jwk-file", help="a public JWK or JWK Set (JSON file)")
        keys.add_argument("--jwks-url", help="the resource's JWKS URL, fetched now (https)")
        parser.add_argument(
            "--type",
            action="append",
            required=True,
            metavar="TYPE=TOOL",
            help="an authorization_details type and its tool",
        )
        parser.add_argument("--api-token", help="its bearer token for /api/v1/ (default: generated, printed)")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}; create it in the admin first")
        types = {}
        for pair in options["type"]:
            kind, equals, tool = pair.partition("=")
            if not equals:
                raise CommandError(f"--type takes TYPE=TOOL, not {pair!r}")
            types[kind.strip()] = tool.strip()
        jwks_url = options["jwks_url"] or ""
        try:
            if jwks_url:
                if not jwks_url.startswith("https://"):
                    raise CommandError("--jwks-url must be https")
                jwks = httpx.get(jwks_url, timeout=10).raise_for_status().json()
            else:
                jwks = json.loads(Path(options["jwk_file"]).read_text())
        except (OSError, ValueError, httpx.HTTPError) as error:
            raise CommandError(f"could not read the keys: {error}") from error
        api_token = options["api_token"] or new_token()
        try:
            resource = register_resource(
                tenant=tenant,
                slug=options["slug"],
                name=options["name"],
                audience=options["audience"],
                jwks=jwks,
                types=types,
                api_token=api_token,
                jwks_url=jwks_url,
            )
        except ServiceError as error:
            raise CommandError(error.message) from error
        self.stdout.write(f"registered resource {resource.agent.slug} in {tenant.slug}")
        self.stdout.write(f"  audience:  {resource.agent.audience}")
        for kind, tool in sorted(resource.types.items()):
            self.stdout.write(f"  type:      {kind} -> {tool}")
        if not options["api_token"]:
            self.stdout.write(f"  API token (shown once):  {api_token}")
