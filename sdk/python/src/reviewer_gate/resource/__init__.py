"""The resource's side: require a Reviewer decision on your own endpoints, whoever calls them.

- `routes`: `Route` (method, path template, the function that describes a request as RAR
  `authorization_details`), `authorization_detail`, `ProtectedRequest`;
- `challenge`: `ResourceKey` (the resource's Ed25519 key: signs the TAC challenge, keys its `txn`);
- `callers`: who sent the request (`Caller`, `api_key_caller`, `trusted_header_caller`);
- `guard`: `ResourceGuard`, the framework-free enforcement point (challenge, verify + consume + outcome);
  `intake`: its 202 mode; `answers`: what it answers itself;
- `asgi`: `ReviewerGateMiddleware` (Starlette, FastAPI); `wsgi`: `ReviewerGateWSGIMiddleware` (Django,
  Flask); `reviewer_gate.proxy` runs the same guard in front of an API that cannot be changed.

No Django, no Starlette needed: the middlewares speak plain ASGI and WSGI.
"""

from reviewer_gate.resource.answers import Answer
from reviewer_gate.resource.asgi import ReviewerGateMiddleware
from reviewer_gate.resource.callers import Caller, api_key_caller, trusted_header_caller
from reviewer_gate.resource.challenge import CHALLENGE_TYPE, ResourceKey
from reviewer_gate.resource.guard import Release, ResourceGuard
from reviewer_gate.resource.routes import (
    OperationError,
    ProtectedRequest,
    Route,
    authorization_detail,
)
from reviewer_gate.resource.wsgi import ReviewerGateWSGIMiddleware

__all__ = [
    "CHALLENGE_TYPE",
    "Answer",
    "Caller",
    "OperationError",
    "ProtectedRequest",
    "Release",
    "ResourceGuard",
    "ResourceKey",
    "ReviewerGateMiddleware",
    "ReviewerGateWSGIMiddleware",
    "Route",
    "api_key_caller",
    "authorization_detail",
    "trusted_header_caller",
]
