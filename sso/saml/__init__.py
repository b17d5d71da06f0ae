"""SAML 2.0 sign-in per tenant on djangosaml2 and pysaml2: the tenant's service-provider configuration
(`config`), what Reviewer checks of an assertion beyond pysaml2 and how a refusal is named
(`assertions`), and the login, assertion-consumer and metadata views (`views`)."""
