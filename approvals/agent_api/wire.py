"""What every agent-facing endpoint answers the same way: the error body and the body-size limit.

The REST API (api.py) and the A2A push webhook (push.py) read bodies through here; a refusal is a
`HostileInput`, an IntakeError (lib/errors.py), so it answers with the one error body:
`{"error": {"code": ..., "message": ..., "field": ...}}`, with `field` the dotted path of the input at
fault (or None). Nothing here imports Django models or the services.
"""

import json
import math

from django.conf import settings

from audit.verify.hashing import first_inexact_number
from lib.errors import IntakeError


def intake_limit() -> int:
    """The largest body an agent may send: the action and consequences cap, with room for the rest."""
    return settings.PROPOSAL_MAX_BYTES * 2


def body_too_large(request) -> bool:
    """True when the body is over intake_limit(): first by its declared length, before reading it."""
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if declared.isdigit() and int(declared) > intake_limit():
        return True
    return len(request.body) > intake_limit()


def too_large_message() -> str:
    return f"the body is larger than {intake_limit()} bytes"


# ---------------------------------------------------------------------------------------------------
# Values no agent may send. Python's json module reads NaN, Infinity, integers of
# any size, NUL characters and nesting as deep as its recursion allows; each of those later broke the
# canonical JSON, PostgreSQL or the recursion limit with a 500. Both intake paths (REST and push) read
# bodies with `load_json`, which refuses them with the path of the value at fault.

MAX_DEPTH = 32  # far deeper than any approval request needs, far below the recursion limit


class HostileInput(IntakeError):
    """A JSON value Reviewer refuses: 400 with a stable code and the dotted path of the value."""


def load_json(raw: bytes | str):
    """Parse a body and refuse the values above; raises HostileInput, or ValueError for invalid JSON."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise HostileInput("too_deep", f"the body nests deeper than {MAX_DEPTH} levels") from None
    refuse_hostile_values(value)
    return value


def refuse_hostile_values(value, path: tuple = ()) -> None:
    """Walk a parsed JSON value (without recursion) and raise HostileInput at the first bad one."""
    stack = [(value, path)]
    while stack:
        value, path = stack.pop()
        field = ".".join(str(part) for part in path) or None
        if len(path) > MAX_DEPTH:
            raise HostileInput("too_deep", f"{field} nests deeper than {MAX_DEPTH} levels", field)
        if isinstance(value, float) and not math.isfinite(value):
            raise HostileInput("bad_number", f"{field}: NaN and Infinity are not JSON numbers", field)
        if isinstance(value, int | float) and first_inexact_number(value):  # a number, not a subtree
            # A float such as 1e21 too: PostgreSQL's jsonb would store it as an integer beyond the range,
            # and the action's digest could not be computed again from what was stored.
            raise HostileInput(
                "bad_number",
                f"{field}: numbers beyond ±(2**53 - 1) are not exact in JSON; send a string",
                field,
            )
        if isinstance(value, str) and "\x00" in value:
            raise HostileInput("nul_character", f"{field}: text may not contain NUL (U+0000)", field)
        if isinstance(value, dict):
            for key, item in value.items():
                if "\x00" in key:
                    raise HostileInput("nul_character", f"{field}: a key contains NUL (U+0000)", field)
                stack.append((item, (*path, key)))
        elif isinstance(value, list):
            stack.extend((item, (*path, index)) for index, item in enumerate(value))
