"""The only code in approvals that builds SQL text: the few statements the ORM cannot make fast enough
on a measured hot path. Everything else in approvals reads and writes through the ORM.

Each statement here names the `make bench` row it serves (bench/README.md) and what it gained there,
and has a test proving it does what its plain-ORM twin does, on SQLite and PostgreSQL
(tests/approvals/test_storage_twins.py). Only quoted names from the models and placeholders go into the
text; every value is a parameter. The text is built once per process (`lru_cache`), so a request does
not rebuild and compile an expression tree.

- `rows`: the models' quoted names, a model's row read into an instance (`Model.from_db`, with the
  ORM's converters), a plain INSERT or UPDATE of an instance.
- `quotas`: intake's quota lock, its open-proposal counts, the spend of both buckets.
- `intake`: intake's one read, and the proposal inserted with its pinned policy versions.
- `decisions`: the consume as one statement.
- `outbox`: the worker's claim of a due message in one statement (tests/approvals/test_outbox_storage.py).
- `halts`, `history`, `tokens`: the halt check, a target's history counts and the agent token lookup
  (tests/approvals/test_storage_halts.py, test_storage_history.py, test_storage_tokens.py).

Modules here import the models and nothing of services, selectors or policy: a caller that composes a
statement from another's part (a halt check, a history count) passes that part's text in.
"""
