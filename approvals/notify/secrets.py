"""Secrets named by reference, never stored in the database: "env:NAME" reads the environment variable,
"file:/path" reads the file (its content, stripped). A missing secret is an error naming the reference,
never an empty string that would sign or verify anything."""

import os
from pathlib import Path


class SecretMissing(Exception):
    pass


def reference_error(ref: str) -> str | None:
    if not isinstance(ref, str) or not (ref.startswith("env:") or ref.startswith("file:")) or len(ref) < 5:
        return 'a secret reference is "env:NAME" or "file:/path"'
    return None


def read_secret(ref: str) -> str:
    problem = reference_error(ref)
    if problem:
        raise SecretMissing(f"{ref!r}: {problem}")
    kind, name = ref.split(":", 1)
    if kind == "env":
        value = os.environ.get(name, "")
    else:
        try:
            value = Path(name).read_text()
        except OSError as error:
            raise SecretMissing(f"{ref}: cannot read the file ({error.strerror})") from error
    value = value.strip()
    if not value:
        raise SecretMissing(f"{ref}: empty")
    return value
