"""The admin of single sign-on: a tenant's identity provider, its group mappings, and (read-only) the
people it provisioned. Superusers only: a provider decides who may approve. Changes go through
sso/sign_in/configuration.py with their audit event; SCIM records change only through SCIM."""

from django import forms
from django.contrib import admin
from django.urls import reverse
from django.utils.html import escape

from sso.models import ExternalIdentity, IdentityProvider, ScimGroup, ScimUser
from sso.saml.config import metadata_entity_id
from sso.sign_in import configuration
from tenants.models import ProviderGroupMapping


class SuperuserOnly(admin.ModelAdmin):
    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request, obj=None):
        return self.has_module_permission(request)

    has_add_permission = has_change_permission = has_delete_permission = has_view_permission


class AuditedConfiguration(SuperuserOnly):
    def save_model(self, request, obj, form, change):
        configuration.save_provider_configuration(obj, actor=request.user, changed=list(form.changed_data))

    def delete_model(self, request, obj):
        configuration.delete_provider_configuration(obj, actor=request.user)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            configuration.delete_provider_configuration(obj, actor=request.user)


# Django's own URL form field, as the model's URLField gave the admin before: a scheme is assumed when
# none is typed, and the URL validator runs.
_OIDC_ISSUER = forms.URLField(
    max_length=300, assume_scheme="https", error_messages={"invalid": "an OpenID Connect issuer is a URL"}
)


class IdentityProviderForm(forms.ModelForm):
    class Meta:
        model = IdentityProvider
        exclude: list[str] = []  # every field; the fieldsets below order them
        # Said here rather than on the model: what a person setting up a provider must know first.
        help_texts = {
            "allowed_email_domains": "space-separated; empty allows any domain the provider vouches for. "
            "Also how 'Sign in with single sign-on' finds this tenant from a work e-mail: with none, "
            "people type the tenant's short name",
            "scopes": "add the provider's groups scope where it needs one for the groups claim (Okta: "
            "groups); a scope the provider does not know fails every sign-in",
        }

    def clean_issuer(self) -> str:
        """An OpenID Connect issuer is a URL (its discovery document lives under it), typed without a
        scheme read as https; a SAML entity ID is any URI, a URN included, checked against the metadata
        in clean()."""
        issuer = self.cleaned_data["issuer"]  # stripped by the CharField
        if self.cleaned_data.get("protocol") != IdentityProvider.Protocol.SAML:
            return _OIDC_ISSUER.clean(issuer)
        if any(character.isspace() for character in issuer):
            raise forms.ValidationError("an issuer has no spaces in it")
        return issuer

    def clean(self):
        data = super().clean() or {}
        if data.get("protocol") == IdentityProvider.Protocol.SAML:
            declared = metadata_entity_id(data.get("saml_metadata") or "")
            if not declared:
                self.add_error(
                    "saml_metadata", "paste the identity provider's SAML metadata XML (an EntityDescriptor)"
                )
            elif data.get("issuer") and declared != data["issuer"]:
                self.add_error(
                    "issuer", f"the metadata's entityID is {declared}: the issuer must be exactly that"
                )
            if data.get("step_up") == IdentityProvider.StepUp.IDP:
                self.add_error(
                    "step_up", "a SAML provider cannot confirm a vote: choose Reviewer's own factors"
                )
        elif not (data.get("client_id") or "").strip():
            self.add_error("client_id", "an OpenID Connect provider needs the client id Reviewer has there")
        return data


SAML_METADATA = "/accounts/sso/saml/<tenant's short name>/metadata/"
SAML_ACS = "/accounts/sso/saml/<tenant's short name>/acs/"
SAML_HELP = (
    "Reviewer's metadata for the provider: {metadata} (entity ID); its assertion consumer URL: {acs}. "
    "The NameID (persistent) names the person; the groups claim below is the SAML attribute of group names."
)


@admin.register(IdentityProvider)
class IdentityProviderAdmin(AuditedConfiguration):
    form = IdentityProviderForm
    list_display = ["tenant", "display_name", "protocol", "issuer", "enabled", "require_sso", "step_up"]
    fieldsets = [
        (None, {"fields": ["tenant", "enabled", "display_name", "protocol", "issuer"]}),
        (
            "OpenID Connect",
            {"fields": ["client_id", "client_secret_env", "client_secret_file", "scopes"]},
        ),
        (
            "SAML 2.0",
            {
                "fields": ["saml_metadata", "saml_email_attribute"],
                "description": SAML_HELP.format(metadata=SAML_METADATA, acs=SAML_ACS),
            },
        ),
        (
            "Who signs in",
            {"fields": ["allowed_email_domains", "subject_claim", "groups_claim", "create_users"]},
        ),
        ("Local passwords", {"fields": ["require_sso", "break_glass_user"]}),
        ("Step-up for votes", {"fields": ["step_up", "step_up_acr", "step_up_amr"]}),
    ]
    raw_id_fields = ["break_glass_user"]

    def get_fieldsets(self, request, obj=None):
        """The SAML section names Reviewer's own URLs for this tenant; before a tenant is chosen, with
        its short name as a placeholder. The admin shows a fieldset's description as HTML, so a bare
        "<tenant>" vanished as an unknown tag ("/accounts/sso/saml//metadata/"): the text is escaped."""
        fieldsets = super().get_fieldsets(request, obj)
        slug = obj.tenant.slug if obj is not None and obj.tenant_id else None
        urls = (
            {
                "metadata": reverse("sso:saml_metadata", args=[slug]),
                "acs": reverse("sso:saml_acs", args=[slug]),
            }
            if slug
            else {"metadata": SAML_METADATA, "acs": SAML_ACS}
        )
        return [
            (name, {**options, "description": escape(SAML_HELP.format(**urls))})
            if name == "SAML 2.0"
            else (name, options)
            for name, options in fieldsets
        ]


@admin.register(ProviderGroupMapping)
class ProviderGroupMappingAdmin(AuditedConfiguration):
    list_display = ["tenant", "external_name", "group"]
    list_filter = ["tenant"]


class ReadOnly(SuperuserOnly):
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(ExternalIdentity)
class ExternalIdentityAdmin(ReadOnly):
    list_display = ["user", "issuer", "subject", "last_sign_in_at"]
    search_fields = ["user__username", "subject", "email"]


@admin.register(ScimUser)
class ScimUserAdmin(ReadOnly):
    list_display = ["user_name", "tenant", "external_id", "active", "updated_at"]
    list_filter = ["tenant", "active"]


@admin.register(ScimGroup)
class ScimGroupAdmin(ReadOnly):
    list_display = ["display_name", "tenant", "updated_at"]
