"""SCIM 2.0 provisioning under /scim/v2/ on django-scim2 (RFC 7643 and 7644): the library's adapters,
filters, bearer-token check, schemas, ServiceProviderConfig and views (`adapters`, `filters`, `auth`,
`schemas`, `config`, `views`, named in reviewer/fixed_settings.py's SCIM_SERVICE_PROVIDER), the state
changes they hand every change to (`provisioning`), and the hint that closes a deprovisioned person's
open sockets (`access`), and what a request body may be before it is read (`body`)."""
