"""Reviewer as an A2A client: parsing what agents push, calling their A2A servers (continuations, cancels,
task states, ListTasks) through the guarded transport, and finding tasks whose push was lost."""
