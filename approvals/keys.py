"""Moved to signing_keys/ (issue 11), which audit/ may import too. Kept so approvals/services keeps
importing `from approvals import keys` until it imports signing_keys directly."""

from signing_keys import *  # noqa: F401, F403
