from django.urls import path

from approvals.live import consumers

# Channels routes ASGI consumers with Django's path(), whose stubs (django-stubs) accept only views, and
# URLRouter's stubs (types-channels) want their own pattern type: the ignores below are those two gaps.
websocket_urlpatterns = [
    path("ws/queue/", consumers.QueueConsumer.as_asgi()),  # type: ignore[arg-type]
    path("ws/proposals/<uuid:proposal_id>/", consumers.ProposalConsumer.as_asgi()),  # type: ignore[arg-type]
]
