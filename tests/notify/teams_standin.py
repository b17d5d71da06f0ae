"""A local stand-in for a Microsoft Teams Workflows incoming webhook ("Post to a channel when a webhook
request is received"): Teams cannot be reached from here (no network beyond loopback). It takes the
POST as the workflow does (a JSON message whose attachment is an Adaptive Card), refuses any other
shape with 400, answers 202 Accepted, and records the cards it would post to the channel."""

import json

from tests.notify.receivers import LoopbackServer

ADAPTIVE = "application/vnd.microsoft.card.adaptive"


class TeamsWebhook(LoopbackServer):
    def __init__(self):
        super().__init__()
        self.cards: list[dict] = []
        self.status = 202

    def handle(self, path, headers, body):
        try:
            message = json.loads(body)
            (attachment,) = message["attachments"]
            assert message["type"] == "message" and attachment["contentType"] == ADAPTIVE
            card = attachment["content"]
            assert card["type"] == "AdaptiveCard" and card["version"]
        except (ValueError, KeyError, AssertionError, TypeError):
            return 400
        with self.lock:
            if self.status < 300:
                self.cards.append(card)
        return self.status

    @property
    def url(self) -> str:
        return self.origin + "/workflows/triggers/manual/paths/invoke?sig=test-signature"
