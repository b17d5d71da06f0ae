"""`manage.py totp_code [username ...]`: the codes people's authenticators show now (demo without a phone),
each with the seconds it stays the one the authenticator shows ("(23 s left)"), so a code is not typed
as it changes."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django_otp.plugins.otp_totp.models import TOTPDevice

from approvals.management.commands.seed_demo import current_code, seconds_left


class Command(BaseCommand):
    help = "Print each user's current TOTP code (all users with an authenticator when none is named)."

    def add_arguments(self, parser):
        parser.add_argument("usernames", nargs="*")

    def handle(self, *args, usernames, **options):
        devices = TOTPDevice.objects.filter(confirmed=True).select_related("user").order_by("user__username")
        if usernames:
            known = set(
                get_user_model().objects.filter(username__in=usernames).values_list("username", flat=True)
            )
            missing = [name for name in usernames if name not in known]
            if missing:
                raise CommandError("no such user: " + ", ".join(missing))
            devices = devices.filter(user__username__in=usernames)
        for device in devices:
            left = seconds_left(device)
            self.stdout.write(f"{device.user.get_username():<16} {current_code(device)}  ({left} s left)")
