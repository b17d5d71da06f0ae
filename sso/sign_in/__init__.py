"""Signing in through a tenant's identity provider, whatever the protocol: the state changes of a sign-in
(`services`: the person matched or created, tenant membership, provider-managed groups, refusals
recorded), the admin's audited changes of a provider's configuration (`configuration`), and whether a
local password still counts (`required`, which imports no approvals so that accounts/ may ask it)."""
