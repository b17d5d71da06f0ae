from django.urls import path

from approvals.live import consumers

websocket_urlpatterns = [
    path("ws/queue/", consumers.QueueConsumer.as_asgi()),
    path("ws/proposals/<uuid:proposal_id>/", consumers.ProposalConsumer.as_asgi()),
]
