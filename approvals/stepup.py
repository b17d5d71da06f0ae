"""The step-up a decision request carries: a fresh sign-in at the tenant's identity provider for this
proposal and digest (sso/oidc/idp_step_up.py kept it in the session) where the tenant confirms votes there,
else Reviewer's own factors (accounts/stepup.py). The services decide whether it satisfies the policy."""

from django.utils import timezone
from django_otp.plugins.otp_static.models import StaticDevice
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts import stepup
from accounts.stepup import ProviderStepUp, StepUp
from sso.models import ExternalIdentity, IdentityProvider
from sso.oidc import idp_step_up


def confirms_at_provider(tenant_id) -> IdentityProvider | None:
    """The tenant's provider when the tenant confirms votes by a fresh sign-in there."""
    return IdentityProvider.objects.filter(
        tenant_id=tenant_id,
        enabled=True,
        protocol=IdentityProvider.Protocol.OIDC,  # a SAML provider offers no bound re-authentication
        step_up=IdentityProvider.StepUp.IDP,
    ).first()


def provider_step_up(session, proposal, digest: str, *, reread: bool = False) -> ProviderStepUp | None:
    """The provider's confirmation for this proposal and digest, taken from the session (usable once).
    `reread`: a socket's session was read when it connected, and the confirmation came later through
    the page's requests, so it is read again from the session store first."""
    if session is None or confirms_at_provider(proposal.tenant_id) is None:
        return None
    if reread:
        store = getattr(session, "_wrapped", session)
        store.__dict__.pop("_session_cache", None)  # SessionBase reads the store again on next access
    proved = idp_step_up.take(session, proposal.id, digest)
    if proved is None:
        return None
    return ProviderStepUp(
        stepup.IDP,
        timezone.now(),
        bound_to=(proved["proposal"], proved["digest"]),
        acr=proved["acr"],
        amr=tuple(proved["amr"]),
    )


def step_up_for(
    user, otp_code: str, session, *, passkey=None, proposal, digest: str, reread: bool = False
) -> StepUp | None:
    """The provider's confirmation when the session holds one for this proposal and digest, else what
    accounts.stepup.step_up_for makes of the code, the passkey or the session's earlier step-up."""
    confirmed = provider_step_up(session, proposal, digest, reread=reread)
    if confirmed is not None:
        return confirmed
    return stepup.step_up_for(
        user, otp_code, session, passkey=passkey, proposal_id=proposal.id, digest=digest
    )


NOT_READ = object()


def provider_panel(
    proposal, session, provider=NOT_READ, *, user, has_identity: bool | None = None
) -> dict | None:
    """What the decision form shows where the tenant confirms votes at its provider and the person has an
    identity there (a local account cannot sign in there, so "Confirm at" would only fail): the
    provider's name, and whether this session holds a confirmation for this proposal's digest now.
    `provider` and `has_identity`: what confirms_at_provider and identity_holders answered, when the
    caller read them already (the fan-out, once for all sockets)."""
    if provider is NOT_READ:
        provider = confirms_at_provider(proposal.tenant_id)
    if provider is None:
        return None
    if has_identity is None:
        has_identity = bool(identity_holders(provider, [user.pk]))
    if not has_identity:
        return None
    return {
        "name": provider.display_name,
        "confirmed": idp_step_up.held(session, proposal.id, proposal.action_digest),
    }


def identity_holders(provider: IdentityProvider | None, user_ids) -> set:
    """Which of these people have an identity at the provider (one query)."""
    if provider is None:
        return set()
    return set(
        ExternalIdentity.objects.filter(provider=provider, user_id__in=user_ids).values_list(
            "user_id", flat=True
        )
    )


def code_owners_among(user_ids) -> set:
    """Which of these people have an authenticator app or backup codes, the devices that answer a
    one-time code (one query; the socket fan-out asks for all its people at once). The device of a
    session the provider verified answers no code, so a person who only signs in there has none."""
    return set(
        TOTPDevice.objects.filter(user_id__in=user_ids, confirmed=True)
        .values_list("user_id", flat=True)
        .union(
            StaticDevice.objects.filter(user_id__in=user_ids, confirmed=True).values_list(
                "user_id", flat=True
            )
        )
    )
