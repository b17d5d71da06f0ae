"""WebSocket consumers (filled in by the workspace work)."""

from channels.generic.websocket import AsyncJsonWebsocketConsumer


class QueueConsumer(AsyncJsonWebsocketConsumer):
    pass


class ProposalConsumer(AsyncJsonWebsocketConsumer):
    pass
