"""What a SCIM request body may be before any of it is read: its size, its nesting and the length of its
strings. Provisioning services send flat documents of short values; a deeper or larger one is refused
with SCIM's error (RFC 7644 3.12) instead of reaching the parser's recursion limit or the database."""

import json
from typing import Any

from django_scim import exceptions

MAX_BODY_BYTES = 1_000_000  # a PATCH of the most members a request may name is under a tenth of it
MAX_DEPTH = 32
MAX_STRING_CHARS = 1000  # names and identifiers; e-mail addresses are held to 254 (sso/scim/provisioning.py)


def too_large() -> exceptions.SCIMException:
    return exceptions.SCIMException(f"the body is larger than {MAX_BODY_BYTES} bytes", status=413)


def parse(raw: bytes) -> Any:
    """The JSON document of a request body, or a SCIM error saying why not."""
    if len(raw) > MAX_BODY_BYTES:
        raise too_large()
    try:
        document = json.loads(raw.decode("utf-8").strip() or "{}")
    except RecursionError:  # the parser's own limit, far past MAX_DEPTH
        raise _too_deep() from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise exceptions.BadRequestError(
            f"the body is not JSON: {error}", scim_type="invalidSyntax"
        ) from None
    _check(document)
    return document


def _too_deep() -> exceptions.SCIMException:
    return exceptions.BadRequestError(
        f"the body is nested deeper than {MAX_DEPTH} levels", scim_type="invalidSyntax"
    )


def _check(document: Any) -> None:
    pending = [(document, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, str):
            if len(value) > MAX_STRING_CHARS:
                raise exceptions.BadRequestError(
                    f"every name and value in the body is at most {MAX_STRING_CHARS} characters",
                    scim_type="invalidValue",
                )
            continue
        if isinstance(value, dict):
            children = [*value.keys(), *value.values()]
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > MAX_DEPTH:
            raise _too_deep()
        pending.extend((child, depth + 1) for child in children)
