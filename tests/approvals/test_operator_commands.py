"""What an operator's commands report is what they did: setup_tenant reads each person back."""

import io

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.django_db


def test_setup_tenant_reports_each_persons_role_groups_and_admin_site_as_stored():
    out = io.StringIO()
    call_command(
        "setup_tenant", "acme", "--name", "Acme", "--group", "finance", "--create-users",
        "--role", "dana:admin", "--member", "alice:finance", stdout=out,
    )  # fmt: skip
    printed = out.getvalue()
    # dana was named with no group: as an admin she is in the admins group and uses /admin/.
    assert "dana: admin; groups: admins; uses /admin/" in printed
    assert "alice: reviewer; groups: finance\n" in printed
    assert "no groups" not in printed


def test_setup_tenant_refuses_an_admin_of_a_tenant_without_an_admin_group_by_name():
    from django.core.management.base import CommandError

    from tenants.models import Tenant

    call_command("setup_tenant", "acme", "--name", "Acme", stdout=io.StringIO())
    Tenant.objects.filter(slug="acme").update(admin_group=None)  # an admin cleared it in /admin/

    with pytest.raises(CommandError, match="acme has no admin group"):
        call_command("setup_tenant", "acme", "--create-users", "--role", "dana:admin", stdout=io.StringIO())
