"""The provider's claims and the test's control endpoints.

ID tokens carry `email`, `groups` (the names of the person's Django groups here), `acr` and `amr` (what the
test set for the person: how strongly the provider says they signed in), besides what django-oauth-toolkit
adds (iss, aud, sub, exp, iat, auth_time, nonce). `/_control/users` and `/_control/clients` exist only in
this stand-in: the test creates people, their groups and the relying party's client through them.
"""

import json

from django.contrib.auth.models import Group, User
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from oauth2_provider.models import get_application_model
from oauth2_provider.oauth2_validators import OAuth2Validator

# username -> {"acr": ..., "amr": [...], "email_verified": ...}, set through /_control/users.
STRENGTH: dict[str, dict] = {}


class ClaimsValidator(OAuth2Validator):
    oidc_claim_scope = None  # every claim below goes into the ID token whatever the scopes

    def get_additional_claims(self, request):
        user = request.user
        strength = STRENGTH.get(user.username, {})
        claims = {
            "email": user.email,
            "name": user.get_full_name() or user.username,
            "preferred_username": user.username,
            "groups": sorted(user.groups.values_list("name", flat=True)),
        }
        if "email_verified" in strength:
            claims["email_verified"] = strength["email_verified"]
        if strength.get("acr"):
            claims["acr"] = strength["acr"]
        if strength.get("amr"):
            claims["amr"] = strength["amr"]
        return claims


@csrf_exempt
def control_user(request):
    """POST {"username", "password", "email", "groups": [...], "acr", "amr"}: create or replace a person."""
    body = json.loads(request.body)
    user, _ = User.objects.get_or_create(username=body["username"])
    user.email = body.get("email", "")
    user.set_password(body["password"])
    user.save()
    user.groups.set([Group.objects.get_or_create(name=name)[0] for name in body.get("groups", [])])
    STRENGTH[user.username] = {"acr": body.get("acr", ""), "amr": body.get("amr", [])}
    if "email_verified" in body:
        STRENGTH[user.username]["email_verified"] = body["email_verified"]
    return JsonResponse({"sub": str(user.pk)})


@csrf_exempt
def control_client(request):
    """POST {"client_id", "client_secret", "redirect_uris": [...]}: register the relying party."""
    body = json.loads(request.body)
    application_model = get_application_model()
    application_model.objects.filter(client_id=body["client_id"]).delete()
    application_model.objects.create(
        client_id=body["client_id"],
        client_secret=body["client_secret"],
        client_type=application_model.CLIENT_CONFIDENTIAL,
        authorization_grant_type=application_model.GRANT_AUTHORIZATION_CODE,
        redirect_uris=" ".join(body["redirect_uris"]),
        algorithm=application_model.RS256_ALGORITHM,
        skip_authorization=True,
        name="Reviewer",
    )
    return JsonResponse({"client_id": body["client_id"]})
