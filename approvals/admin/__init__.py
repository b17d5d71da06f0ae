"""The Django admin of the approval domain, one module per area (agents, policies, halts, notifications,
the read-only records). Importing this package registers them all (Django's admin autodiscovery imports
approvals.admin). Tenants and approver groups are in tenants/admin.py, people in accounts/admin.py."""

from approvals.admin import agents, batches, halts, notifications, policies, records  # noqa: F401  (registers the admins)
