"""Two refinements of `transaction.on_commit`, in one place because both read Django's list of the
open transaction's hooks (`connection.run_on_commit`: (savepoint ids, hook, robust) in the order they
were registered; rolling back a savepoint drops the hooks registered inside it, so the list is always
what will run). Outside a transaction both run the hook at once, as on_commit does."""

from django.db import transaction


def on_commit_first(hook, *, robust: bool = True) -> None:
    """on_commit, but run before the hooks registered earlier in the transaction (a hand-off that takes
    microseconds should not wait behind hooks that take round trips)."""
    connection = transaction.get_connection()
    transaction.on_commit(hook, robust=robust)
    hooks = getattr(connection, "run_on_commit", None)
    if connection.in_atomic_block and isinstance(hooks, list) and len(hooks) > 1:
        hooks.insert(0, hooks.pop())


def on_commit_once(key, hook, *, robust: bool = False) -> None:
    """on_commit, unless a hook with this key will already run when the transaction commits (one hook
    per transaction for work that covers every call of it, e.g. chaining the audit events it added)."""
    connection = transaction.get_connection()
    hooks = getattr(connection, "run_on_commit", None)
    if connection.in_atomic_block and isinstance(hooks, list):
        registered = (entry[1] for entry in hooks if isinstance(entry, tuple) and len(entry) > 1)
        if any(getattr(func, "commit_hook_key", None) == key for func in registered):
            return
    hook.commit_hook_key = key
    transaction.on_commit(hook, robust=robust)
