"""The one refusal of single sign-on and provisioning: a stable code and a sentence for the person."""


class SignInRefused(Exception):
    """A sign-in through the identity provider that changes nothing: the ID token (or assertion) was not
    what this tenant's provider signs for Reviewer, or the person may not sign in here."""

    def __init__(self, code: str, message: str, provider=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.provider = provider  # the tenant's IdentityProvider when known: the refusal goes on its chain


class ProvisioningRefused(Exception):
    """A SCIM request that changes nothing: its HTTP status, SCIM error type (RFC 7644 3.12) and detail."""

    def __init__(self, status: int, detail: str, scim_type: str | None = None):
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.scim_type = scim_type
