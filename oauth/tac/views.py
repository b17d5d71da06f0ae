"""`POST /oauth/txn-authorization`: the transaction authorization endpoint (draft §5): a challenge in,
a transaction (or at once a token) out; a transaction id in, its answer out."""

from typing import Any

from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from oauth.clients import authenticate_client
from oauth.errors import OAuthError, error_response
from oauth.responses import json_answer, page_url, seconds_until
from oauth.tac.services import accept_challenge, poll
from oauth.wire import form_of


@csrf_exempt  # a machine endpoint authenticated by client credentials, never by a cookie
@require_POST
def transaction_authorization(request: HttpRequest) -> JsonResponse:
    try:
        form = form_of(request)
        client = authenticate_client(request, form)
        challenge = form.get("transaction_challenge", "")
        transaction_id = form.get("transaction_authorization_id", "")
        if bool(challenge) == bool(transaction_id):
            raise OAuthError(
                "invalid_request", "send either transaction_challenge or transaction_authorization_id"
            )
        if transaction_id:
            return json_answer(poll(client, transaction_id))
        accepted = accept_challenge(client, challenge)
    except OAuthError as error:
        return error_response(error)
    if accepted.token is not None:
        return json_answer(accepted.token)
    row = accepted.transaction
    now = timezone.now()
    body: dict[str, Any] = {"transaction_authorization_id": str(row.id), "interval": row.interval}
    if row.proposal is not None:
        body["authorization_uri"] = page_url(row.proposal)
        body["expires_in"] = seconds_until(row.proposal.expires_at, now)
    else:
        body["expires_in"] = seconds_until(row.challenge_expires_at, now)
    return json_answer(body)
