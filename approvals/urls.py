"""URLs of the approval domain. Pages (web/views.py), the agent-facing A2A push webhook (agent_api/push.py)
and REST API (agent_api/api.py, with agent_api/pull.py), and the public JWKS."""

from django.urls import path

from accounts import views as account_views
from approvals.agent_api import batches as batch_api  # noqa: F401 (importing it registers /batches)
from approvals.agent_api import pull  # noqa: F401 (importing it registers GET /proposals/{id}/decision)
from approvals.agent_api import push as a2a_views
from approvals.agent_api.api import api
from approvals.notify import delegation_views, push_views, slack_views, teams_views
from approvals.web import batches as batch_pages
from approvals.web import views

app_name = "approvals"

urlpatterns = [
    path("", views.queue, name="queue"),
    path("watching/", views.watching, name="watching"),
    path("proposals/<uuid:proposal_id>/", views.detail, name="detail"),
    path("proposals/<uuid:proposal_id>/decide", views.decide, name="decide"),
    path("proposals/<uuid:proposal_id>/passkey-challenge", views.passkey_challenge, name="passkey_challenge"),
    path("proposals/<uuid:proposal_id>/edit", views.edit, name="edit"),
    path("proposals/<uuid:proposal_id>/revoke", views.revoke, name="revoke"),
    path("proposals/<uuid:proposal_id>/break-glass", views.break_glass, name="break_glass"),
    path("proposals/<uuid:proposal_id>/post-hoc-review", views.post_hoc_review, name="post_hoc_review"),
    path("batches/<uuid:batch_pk>/", batch_pages.batch_page, name="batch"),
    path("batches/<uuid:batch_pk>/decide", batch_pages.decide_batch, name="decide_batch"),
    path("batches/<uuid:batch_pk>/revoke", batch_pages.revoke_batch_view, name="revoke_batch"),
    path("break-glass/", views.break_glass_oversight, name="break_glass_oversight"),
    # Enrollment is accounts' view; its name stays "approvals:enroll" (pages and redirects use it).
    path("accounts/enroll/", account_views.enroll, name="enroll"),
    path("a2a/push/<slug:agent_slug>/", a2a_views.push, name="push"),
    path("api/v1/", api.urls),
    path(".well-known/jwks.json", views.jwks, name="jwks"),
    # Slack (approvals/notify/slack_views.py): its interactivity requests, and the link a person confirms.
    path("slack/interactivity", slack_views.interactivity, name="slack_interactivity"),
    path("slack/link/<str:token>/", slack_views.confirm_link, name="slack_link"),
    # Teams (approvals/notify/teams_views.py): the bot's messaging endpoint, and the link a person confirms.
    path("teams/messages", teams_views.messages, name="teams_messages"),
    path("teams/link/<str:token>/", teams_views.confirm_link, name="teams_link"),
    path("out-of-office/", delegation_views.out_of_office, name="out_of_office"),
    path("out-of-office/<int:delegation_id>/end", delegation_views.end, name="end_delegation"),
    # The installable web app and push devices (approvals/notify/push_views.py).
    path("manifest.webmanifest", push_views.manifest, name="manifest"),
    path("sw.js", push_views.service_worker, name="service_worker"),
    path("push/devices/", push_views.devices, name="push_devices"),
    path("push/subscribe", push_views.subscribe_device, name="push_subscribe"),
    path("push/devices/<int:device_id>/remove", push_views.remove_device, name="push_remove"),
]
