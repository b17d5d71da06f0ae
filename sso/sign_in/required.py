"""Whether a local password may still sign someone in. It imports no app but tenants and its own models,
so accounts/ (which must not depend on approvals/) may ask it."""

from sso.models import IdentityProvider


def sso_required_provider(user) -> IdentityProvider | None:
    """The provider of a tenant of this person that requires single sign-on, unless they are its named
    break-glass admin; None when their local password still counts."""
    return (
        IdentityProvider.objects.filter(enabled=True, require_sso=True, tenant__memberships__user=user)
        .exclude(break_glass_user=user)
        .select_related("tenant")
        .first()
    )


def password_refusal(user) -> str:
    """The sentence a person whose tenant requires single sign-on reads instead of being signed in."""
    provider = sso_required_provider(user)
    if provider is None:
        return ""
    return (
        f"{provider.tenant.name} signs you in through {provider.display_name}: "
        "use “Sign in with single sign-on”."
    )
