"""What single sign-on stores: a tenant's identity provider, the people it vouches for, and the device that
marks a session the provider verified.

Tenant ── IdentityProvider ──< ExternalIdentity (provider, issuer, subject) ── User
                         └── ScimToken (hash of the provisioning bearer token)

A person is matched by the tenant's provider, its issuer and their subject there, never by e-mail: an
e-mail address can be reassigned, an (issuer, subject) pair names one person at one provider for good.
The tenant is part of the match because two tenants' providers may share an issuer (Google Workspace
has one for every customer, a multi-tenant Entra ID app one per directory but any directory's people
can sign in): the same person then has one account per tenant, and one tenant's directory never finds,
renames or re-addresses the account another tenant's created. The group mapping (provider group name →
approver group) lives beside ApproverGroup in tenants/models.py.
"""

import os
import uuid
from pathlib import Path

from django.conf import settings
from django.db import models
from django_otp.models import Device

from tenants.models import Tenant


class IdentityProvider(models.Model):
    class StepUp(models.TextChoices):
        LOCAL = "local", "a code or passkey of Reviewer's (default)"
        IDP = "idp", "a fresh sign-in at the identity provider"

    class Protocol(models.TextChoices):
        OIDC = "oidc", "OpenID Connect"
        SAML = "saml", "SAML 2.0"

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="identity_provider")
    enabled = models.BooleanField(default=True)
    protocol = models.CharField(max_length=10, choices=Protocol.choices, default=Protocol.OIDC)
    display_name = models.CharField(max_length=100, help_text="shown on the sign-in button, e.g. “Acme Okta”")
    # Not a URLField: a SAML entity ID is any URI, and many are URNs ("urn:acme:idp"). The admin's form
    # checks an OpenID Connect issuer as a URL (sso/admin.py IdentityProviderForm.clean_issuer).
    issuer = models.CharField(
        max_length=300,
        help_text="exactly as in the provider's discovery document and its ID tokens"
        " (SAML: its entity ID, a URL or a URN)",
    )
    client_id = models.CharField(max_length=300, blank=True, help_text="OpenID Connect only")
    client_secret_env = models.CharField(
        "client secret: environment variable",
        max_length=100,
        blank=True,
        help_text="the name of the variable that holds the secret (the secret itself is never stored here)",
    )
    client_secret_file = models.CharField(
        "client secret: file", max_length=500, blank=True, help_text="or a file that holds it"
    )
    allowed_email_domains = models.CharField(
        max_length=500,
        blank=True,
        help_text="space-separated; empty allows any domain the provider vouches for",
    )
    subject_claim = models.CharField(
        max_length=50, default="sub", help_text="the claim that names the person for good (Entra ID: oid)"
    )
    groups_claim = models.CharField(max_length=50, default="groups", blank=True)
    scopes = models.CharField(max_length=200, default="openid email profile")
    create_users = models.BooleanField(
        "create people at first sign-in", default=False, help_text="else only people provisioned first"
    )
    require_sso = models.BooleanField(
        "require single sign-on",
        default=False,
        help_text="local passwords of this tenant's members are then refused, except the break-glass admin's",
    )
    break_glass_user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="the one local account that still signs in with a password when the provider is down",
    )
    step_up = models.CharField(max_length=10, choices=StepUp.choices, default=StepUp.LOCAL)
    step_up_acr = models.CharField(
        "step-up acr",
        max_length=200,
        blank=True,
        help_text="space-separated acr values a re-authentication may carry",
    )
    step_up_amr = models.CharField(
        "step-up amr", max_length=200, blank=True, help_text="space-separated amr values it must all carry"
    )

    # SAML 2.0 (sso/saml/): the provider's metadata gives its signing certificate and sign-in URL.
    saml_metadata = models.TextField(
        "SAML metadata",
        blank=True,
        help_text="the identity provider's metadata XML (its entityID must be the issuer above)",
    )
    saml_email_attribute = models.CharField(
        "SAML e-mail attribute", max_length=200, default="email", blank=True
    )

    class Meta:
        verbose_name = "identity provider"

    def __str__(self):
        return f"{self.display_name} ({self.tenant.slug})"

    def client_secret(self) -> str:
        """The secret from its variable or file; empty when neither gives one (sign-in then refuses)."""
        if self.client_secret_env:
            return os.environ.get(self.client_secret_env, "")
        if self.client_secret_file:
            try:
                return Path(self.client_secret_file).read_text().strip()
            except OSError:
                return ""
        return ""

    def email_domains(self) -> list[str]:
        return [domain.lower().lstrip("@") for domain in self.allowed_email_domains.split()]


class ExternalIdentityQuerySet(models.QuerySet):
    def at(self, provider: "IdentityProvider", subject: str) -> "ExternalIdentityQuerySet":
        """The identity this tenant's provider knows by `subject`: never another tenant's, even where
        the two providers share an issuer."""
        return self.filter(provider=provider, issuer=provider.issuer, subject=subject)


class ExternalIdentity(models.Model):
    """One person at one tenant's provider. `issuer` is copied from the provider at creation: a provider
    reconfigured with another issuer does not hand its people to whoever signs in there."""

    provider = models.ForeignKey(IdentityProvider, on_delete=models.CASCADE, related_name="identities")
    issuer = models.CharField(max_length=300)
    subject = models.CharField(max_length=255)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="external_identities"
    )
    email = models.EmailField(blank=True)
    last_sign_in_at = models.DateTimeField(null=True, blank=True)

    objects = ExternalIdentityQuerySet.as_manager()

    class Meta:
        verbose_name_plural = "external identities"
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "issuer", "subject"], name="one_user_per_provider_issuer_subject"
            ),
            models.UniqueConstraint(fields=["provider", "user"], name="one_identity_per_provider_user"),
        ]

    def __str__(self):
        return f"{self.user} at {self.issuer} ({self.subject})"


class IdentityProviderDevice(Device):
    """The django-otp device of a session the provider verified (its own second factor, by its policy):
    django-otp's is_verified() then holds as after a local code. It checks no token, so it never answers
    a code, and never satisfies a vote's step-up (approvals/stepup.py asks for a fresh factor)."""

    def verify_token(self, token):
        return False

    def verify_is_allowed(self):
        return False, {"reason": "a provider session is not a one-time code"}


class ScimToken(models.Model):
    """The tenant's SCIM bearer token, stored as its SHA-256: shown once when made, never again."""

    provider = models.OneToOneField(IdentityProvider, on_delete=models.CASCADE, related_name="scim_token")
    token_sha256 = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"SCIM token of {self.provider.tenant.slug}"


class ScimUser(models.Model):
    """A person as the tenant's provisioning client (Okta, Entra ID) sees them: the SCIM resource, with the
    columns its filters name (`userName`, `externalId`, `active`). The account is `user`; `external_id` is
    also the person's subject at the provider (their ExternalIdentity), which is how Okta's and Entra's
    SCIM and sign-in name the same person."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="scim_users")
    scim_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    external_id = models.CharField(max_length=255, blank=True)
    user_name = models.CharField(max_length=150)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="scim_records")
    active = models.BooleanField(default=True)
    # The e-mail addresses as the client sent them ({value, type, primary}); the primary one is the
    # account's e-mail.
    emails = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "SCIM user"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user_name"], name="scim_user_name_unique_per_tenant"),
            models.UniqueConstraint(fields=["tenant", "user"], name="one_scim_user_per_tenant_user"),
        ]

    def __str__(self):
        return f"{self.user_name} ({self.tenant.slug})"


class ScimGroup(models.Model):
    """A group as the provisioning client pushes it. Its members join the approver groups its
    `display_name` is mapped to (tenants' ProviderGroupMapping)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="scim_groups")
    scim_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    external_id = models.CharField(max_length=255, blank=True)
    display_name = models.CharField(max_length=200)
    members = models.ManyToManyField(ScimUser, related_name="groups", blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "SCIM group"
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "display_name"], name="scim_group_name_unique_per_tenant"
            )
        ]

    def __str__(self):
        return f"{self.display_name} ({self.tenant.slug})"


class SamlAssertionSeen(models.Model):
    """Every SAML assertion accepted, by its issuer and ID, until it expires: the same assertion posted
    again (a replay) is refused. Rows past `expires_at` may go (the assertion is refused as expired then)."""

    issuer = models.CharField(max_length=300)
    assertion_id = models.CharField(max_length=256)
    expires_at = models.DateTimeField()
    seen_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "SAML assertion seen"
        constraints = [
            models.UniqueConstraint(fields=["issuer", "assertion_id"], name="one_use_per_saml_assertion")
        ]

    def __str__(self):
        return f"{self.assertion_id} from {self.issuer}"
