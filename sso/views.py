"""Single sign-on pages: "Sign in with single sign-on" (which organisation), the start of a tenant's
sign-in at its provider, the provider's callback, and a vote's step-up at the provider (sso/oidc/ does
OpenID Connect, sso/saml/ SAML)."""

import time

from django import forms
from django.db.models import Q
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods
from django_otp import login as otp_login

from lib.decorators import verified_required
from sso.errors import SignInRefused
from sso.models import IdentityProvider
from sso.oidc import idp_step_up
from sso.oidc.views import ProviderCallback, redirect_to_provider
from sso.sign_in import services


class OrganisationForm(forms.Form):
    organisation = forms.CharField(
        label="Your work e-mail or your organisation's short name",
        max_length=254,
        widget=forms.TextInput(
            attrs={"autocomplete": "email", "autocapitalize": "off", "spellcheck": "false"}
        ),
    )

    def clean_organisation(self):
        value = self.cleaned_data["organisation"].strip().lower()
        domain = value.rpartition("@")[2]
        matches = IdentityProvider.objects.select_related("tenant").filter(enabled=True)
        matches = matches.filter(Q(tenant__slug=value) | Q(allowed_email_domains__icontains=domain))
        provider = next((p for p in matches if p.tenant.slug == value or domain in p.email_domains()), None)
        if provider is None:
            raise forms.ValidationError(
                "no organisation here signs in through a provider by that name or domain"
            )
        return provider


@never_cache
@require_http_methods(["GET", "POST"])
def choose(request):
    form = OrganisationForm(request.POST if request.method == "POST" else None)
    if form.is_bound and form.is_valid():
        provider = form.cleaned_data["organisation"]
        target = reverse("sso:start", kwargs={"tenant_slug": provider.tenant.slug})
        if request.POST.get("next"):
            target += "?" + urlencode({"next": request.POST["next"]})
        # A link, not a redirect: the sign-in pages' CSP allows forms to post only here (form-action
        # 'self'), and browsers apply that to every redirect after the post, the provider's included.
        return render(request, "sso/continue.html", {"provider": provider, "target": target})
    return render(
        request,
        "sso/choose.html",
        {"form": form, "next": request.GET.get("next", "")},
        status=400 if form.is_bound else 200,
    )


@never_cache
@require_GET
def start(request, tenant_slug):
    provider = (
        IdentityProvider.objects.select_related("tenant")
        .filter(tenant__slug=tenant_slug, enabled=True)
        .first()
    )
    if provider is None:
        raise Http404("this organisation does not sign in through an identity provider")
    if provider.protocol == IdentityProvider.Protocol.SAML:
        target = reverse("sso:saml_login", kwargs={"tenant_slug": tenant_slug})
        if request.GET.get("next"):
            target += "?" + urlencode({"next": request.GET["next"]})
        return redirect(target)
    try:
        return redirect_to_provider(request, provider)
    except SignInRefused as refusal:
        return refused(request, refusal, provider=provider)


def refused(request, refusal: SignInRefused, *, provider=None):
    services.record_refusal(provider or refusal.provider, refusal)
    return render(request, "sso/refused.html", {"refusal": refusal}, status=400)


def _signed_in(request, user):
    if not getattr(user, "sso_step_up", False):  # a step-up keeps the session as it was
        otp_login(request, user.sso_device)
    return None


@never_cache
@verified_required
@require_GET
def step_up(request, proposal_id):
    """GET /accounts/sso/step-up/<proposal>/?digest=…&next=…: confirm a vote by signing in again at the
    tenant's provider, bound to this proposal and the digest the person is looking at."""
    from approvals.models import Proposal  # the one model of approvals this page reads

    proposal = Proposal.objects.filter(pk=proposal_id, tenant__memberships__user=request.user).first()
    if proposal is None:
        raise Http404("no such proposal")
    provider = (
        IdentityProvider.objects.select_related("tenant")
        .filter(
            tenant_id=proposal.tenant_id,
            enabled=True,
            protocol=IdentityProvider.Protocol.OIDC,
            step_up=IdentityProvider.StepUp.IDP,
        )
        .first()
    )
    if provider is None:
        raise Http404("this tenant confirms votes with Reviewer's own factors")
    digest = request.GET.get("digest", "")[:128]
    remembered = {
        "purpose": "step_up",
        "proposal": str(proposal.id),
        "digest": digest,
        "user": request.user.pk,
        "started": int(time.time()),
    }
    try:
        return redirect_to_provider(
            request,
            provider,
            extra_params=idp_step_up.extra_params(provider, proposal.id, digest),
            remembered=remembered,
        )
    except SignInRefused as refusal:
        return refused(request, refusal, provider=provider)


callback = never_cache(ProviderCallback.as_view(on_refused=refused, on_signed_in=_signed_in))
