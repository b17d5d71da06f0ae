"""Who sent a protected request, as the resource authenticated them: `Caller.sub` becomes the
challenge's `act` (and binds its `txn`) and, in the 202 mode, the proposal's principal."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from reviewer_gate.resource.routes import ProtectedRequest


@dataclass(frozen=True)
class Caller:
    """Who sent the request, as the resource authenticated them: `sub` becomes the challenge's `act`
    and, in the 202 mode, the proposal's principal."""

    sub: str
    name: str = ""


CallerOf = Callable[[ProtectedRequest], "Caller | None"]


def api_key_caller(header: str, keys: Mapping[str, str]) -> CallerOf:
    """Callers identified by an API key in `header`, mapped to their principal id by `keys`."""

    def caller_of(request: ProtectedRequest) -> Caller | None:
        presented = request.header(header)
        sub = keys.get(presented) if presented else None
        return Caller(sub) if sub else None

    return caller_of


def trusted_header_caller(header: str) -> CallerOf:
    """The caller named by `header`, set by a gateway in front that authenticated them (only behind one
    that strips the header from what callers send)."""

    def caller_of(request: ProtectedRequest) -> Caller | None:
        sub = request.header(header)
        return Caller(sub) if sub else None

    return caller_of
