"""RFC 7643/7644 compliance of the SCIM endpoints, checked by scim2-tester (discovery, then create, read,
replace and delete of every resource type the server publishes), through scim2-client in this process."""

import pytest
from scim2_tester import Status, check_server

from sso.models import IdentityProvider
from sso.scim.auth import issue_token
from tests.sso.scim import scim_client

pytestmark = pytest.mark.django_db


def test_scim2_tester_finds_no_error(tenant):
    provider = IdentityProvider.objects.create(
        tenant=tenant, display_name="Acme IdP", issuer="https://idp.acme.example", client_id="reviewer"
    )
    client = scim_client(issue_token(provider), discover=False)

    results = check_server(client)

    failures = [f"{r.title}: {r.reason}" for r in results if r.status in (Status.ERROR, Status.CRITICAL)]
    assert results and not failures, "\n".join(failures)
