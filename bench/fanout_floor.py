"""R2's transport floors: the ASGI application of two bare Daphnes (bench/r2_fanout.py starts them).
Never served by the product.

- `/floor/<group>/`: a socket joins the group and forwards each group message's text to its WebSocket,
  nothing else: no session, no authorization facts, no rendering. A change sent to 50 of these sockets
  costs what any Channels fan-out over Redis and Daphne costs (channels-redis sends each process one
  Redis message and copies it into each of its channels' queues; each consumer dispatches its copy,
  with Channels' `close_old_connections` in a thread before the handler; Daphne; the WebSocket frames;
  the bench's client), so R2's measured row minus this floor is Reviewer's own work per socket.
- `/floor-process/<group>/`: the design R2's README names, one message per Daphne process. The
  process's first socket of a group starts one receiver on a channel of the process's own, in the group;
  each message it receives is written to every socket of the group in this process. What that
  design would cost at the least, before any of Reviewer's work.
"""

import asyncio
import uuid

import django

django.setup()  # the channel layer comes from the product's settings (REDIS_URL, CHANNELS_PREFIX)

from channels.generic.websocket import AsyncWebsocketConsumer  # noqa: E402 (after setup)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402


class Forward(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        self.group = self.scope["url_route"]["kwargs"]["group"]
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code) -> None:
        await self.channel_layer.group_discard(self.group, self.channel_name)

    async def floor_message(self, event) -> None:
        await self.send(text_data=event["text"])


# group -> this process's sockets in it; the group's receiver task (started by the group's first socket:
# r2_fanout.py opens the sockets one after the other, so no two first sockets race)
_local_sockets: dict[str, set["ForwardFromProcess"]] = {}
_receivers: dict[str, asyncio.Task] = {}


class ForwardFromProcess(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        self.group = self.scope["url_route"]["kwargs"]["group"]
        _local_sockets.setdefault(self.group, set()).add(self)
        if self.group not in _receivers:
            # a plain channel, as the product's (approvals/live/process_channel.py)
            channel = f"floor-process.{uuid.uuid4().hex}"
            await self.channel_layer.group_add(self.group, channel)
            _receivers[self.group] = asyncio.create_task(_receive(self.channel_layer, self.group, channel))
        await self.accept()

    async def disconnect(self, code) -> None:
        _local_sockets.get(self.group, set()).discard(self)


async def _receive(layer, group: str, channel: str) -> None:
    while True:
        message = await layer.receive(channel)
        for socket in list(_local_sockets.get(group, ())):
            await socket.send(text_data=message["text"])


application = ProtocolTypeRouter(
    {
        "websocket": URLRouter(
            [
                path("floor/<str:group>/", Forward.as_asgi()),
                path("floor-process/<str:group>/", ForwardFromProcess.as_asgi()),
            ]
        )
    }
)
