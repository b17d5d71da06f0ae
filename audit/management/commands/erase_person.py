"""`manage.py erase_person USERNAME [--by ADMIN]`: remove a person's personal data (their directory
entry and the name, e-mail, username and password of their account) while every audit chain still
verifies; the trail and its exports then show only their pseudonym (docs/compliance.md "Erasure")."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from audit.erasure import erase_person


class Command(BaseCommand):
    help = "Erase a person's personal data; the audit trail keeps only their pseudonym."

    def add_arguments(self, parser):
        parser.add_argument("username", help="the username of the person to erase")
        parser.add_argument("--by", default="", help="the username of the admin who asked (else: system)")

    def handle(self, *args, username, by, **options):
        people = get_user_model().objects
        user = people.filter(username=username).first()
        if user is None:
            raise CommandError(f"no person with username {username!r}")
        actor = None
        if by:
            actor = people.filter(username=by).first()
            if actor is None:
                raise CommandError(f"--by: no person with username {by!r}")
            if actor.pk == user.pk:
                raise CommandError("--by names the person being erased")
        pseudonym = erase_person(user, actor=actor)
        self.stdout.write(f"erased {username}: the trail now names them only as {pseudonym}")
