"""The admin's people pickers and the dry run's way back: a tenant admin picks a member by typing a
username (autocomplete, among the people of her tenants), and a dry run of an unsaved draft links back
to the form with the fields as typed."""

import io
import re
from html import unescape

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from approvals.models import Policy, PolicyVersion
from approvals.services.policies import create_policy_version
from tenants.models import ApproverGroup
from tests.factories import verified_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(db):
    call_command("seed_demo", "--password", "demo-password-1", "--quiet", stdout=io.StringIO())
    return get_user_model().objects


def test_a_tenant_admin_picks_a_member_by_username_with_autocomplete(demo, outsider):
    client = verified_client(demo.get(username="demo-admin2"))
    ops = ApproverGroup.objects.get(slug="ops")
    page = client.get(f"/admin/tenants/approvergroup/{ops.pk}/change/").content.decode()
    assert "admin-autocomplete" in page  # a search box, not a numeric raw-id input
    assert 'class="vForeignKeyRawIdAdminField"' not in page
    params = {
        "term": "reviewer",
        "app_label": "tenants",
        "model_name": "groupmembership",
        "field_name": "user",
    }
    found = client.get("/admin/autocomplete/", params).json()
    names = {item["text"] for item in found["results"]}
    assert {"reviewer1", "reviewer2"} <= names
    params["term"] = "outsider"
    assert client.get("/admin/autocomplete/", params).json()["results"] == []  # another tenant's person


def test_a_dry_run_of_an_unsaved_draft_links_back_to_the_form_with_its_fields(demo):
    client = verified_client(demo.get(username="demo-admin"))
    refunds = Policy.objects.get(slug="refunds")
    draft = {
        "policy": refunds.pk,
        "agent_pattern": "*",
        "tool_pattern": "payments.refund",
        "condition": "double(args.amount) > 250.0",
        "outcome": "require_approval",
        "thresholds": '[{"group": "finance", "count": 1}]',
        "step_up": "per_vote",
        "ttl_seconds": "3600",
        "_dryrun": "1",
    }
    page = client.post("/admin/approvals/policyversion/add/", draft).content.decode()
    assert 'id="dry-run-summary"' in page
    back_link = re.search(r'<a href="([^"]+)">&larr; Back to the unsaved draft</a>', page)
    assert back_link is not None
    back = unescape(back_link.group(1))
    form = client.get(back).content.decode()
    assert "double(args.amount) &gt; 250.0</textarea>" in form
    assert 'value="payments.refund"' in form
    assert not PolicyVersion.objects.filter(condition="double(args.amount) > 250.0").exists()


def test_a_saved_drafts_dry_run_links_back_to_the_draft(demo):
    author = demo.get(username="demo-admin")
    refunds = Policy.objects.get(slug="refunds")
    draft = create_policy_version(
        refunds, {"outcome": "deny", "tool_pattern": "payments.refund", "thresholds": []}, actor=author
    )
    page = verified_client(author).get(f"/admin/approvals/policyversion/{draft.pk}/dry-run/").content.decode()
    assert f'href="/admin/approvals/policyversion/{draft.pk}/change/">&larr; Back to' in page
