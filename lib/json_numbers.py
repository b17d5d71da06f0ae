"""Numbers JSON keeps exactly: integers within ±(2^53 - 1), and finite floats below 2^53 in size.

Beyond that, JSON's numbers are not portable (RFC 8785 refuses them for hashing), and PostgreSQL's
jsonb turns a float such as 1e21 into the integer 1000000000000000000000 when it stores it, so a value
read back would no longer hash. Data that is stored as JSON and hashed later (audit events, and the
policy fields they record) is checked with this before it is stored."""

import math

MAX_EXACT = 2**53 - 1


def first_inexact_number(value, path: str = "") -> tuple[str, int | float] | None:
    """(where, number) of the first number in `value` that JSON does not keep exactly, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return (path, value) if abs(value) > MAX_EXACT else None
    if isinstance(value, float):
        return (path, value) if not math.isfinite(value) or abs(value) > MAX_EXACT else None
    if isinstance(value, dict):
        items = ((f"{path}.{key}" if path else str(key), item) for key, item in value.items())
    elif isinstance(value, list | tuple):
        items = ((f"{path}[{index}]", item) for index, item in enumerate(value))
    else:
        return None
    for where, item in items:
        found = first_inexact_number(item, where)
        if found:
            return found
    return None
