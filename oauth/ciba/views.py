"""The CIBA endpoints: `POST /bc-authorize` (CIBA §7) and `POST /oauth/token` (the CIBA grant, §10).
Both paths are where Auth0's SDKs look; the server metadata names them."""

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from oauth.ciba.grant import CIBA_GRANT, redeem, start
from oauth.clients import authenticate_client
from oauth.errors import OAuthError, error_response
from oauth.responses import json_answer
from oauth.wire import form_of


@csrf_exempt  # machine endpoints authenticated by client credentials, never by a cookie
@require_POST
def backchannel_authentication(request: HttpRequest) -> JsonResponse:
    try:
        form = form_of(request)
        client = authenticate_client(request, form)
        started = start(client, form)
    except OAuthError as error:
        return error_response(error)
    return json_answer(
        {
            "auth_req_id": str(started.request.id),
            "expires_in": started.expires_in,
            "interval": started.request.interval,
        }
    )


@csrf_exempt
@require_POST
def token(request: HttpRequest) -> JsonResponse:
    try:
        form = form_of(request, json_allowed=True)
        client = authenticate_client(request, form)
        if form.get("grant_type") != CIBA_GRANT:
            raise OAuthError("unsupported_grant_type", f"this token endpoint serves {CIBA_GRANT} only")
        return json_answer(redeem(client, form))
    except OAuthError as error:
        return error_response(error)
