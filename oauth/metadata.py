"""`GET /.well-known/oauth-authorization-server` (RFC 8414): where the doors are and what they speak."""

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from oauth.ciba.grant import CIBA_GRANT


@require_GET
def authorization_server(request: HttpRequest) -> JsonResponse:
    base = settings.REVIEWER_ISSUER
    return JsonResponse(
        {
            "issuer": base,
            "jwks_uri": base + reverse("approvals:jwks"),
            "transaction_authorization_endpoint": base + reverse("oauth:txn_authorization"),
            "token_endpoint": base + reverse("oauth:token"),
            "backchannel_authentication_endpoint": base + reverse("oauth:backchannel"),
            "backchannel_token_delivery_modes_supported": ["poll"],
            "backchannel_user_code_parameter_supported": False,
            "grant_types_supported": [CIBA_GRANT],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "scopes_supported": ["openid"],
        }
    )
