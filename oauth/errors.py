"""OAuth's error answer (RFC 6749 §5.2): `{"error", "error_description"}`, `Cache-Control: no-store`.

The doors answer in their standards' own shape, not Reviewer's `{"error": {"code", …}}`: a TAC or CIBA
client reads `error`. The codes are the standards' (RFC 6749, RFC 8628 §3.5, RFC 9396 §5, CIBA §11,
§13); docs/protect-an-api.md lists which answers what."""

from django.http import JsonResponse


class OAuthError(Exception):
    def __init__(self, error: str, description: str = "", *, status: int = 400, retry_after: int = 0):
        super().__init__(f"{error}: {description}")
        self.error = error
        self.description = description[:500]
        self.status = status
        self.retry_after = retry_after


def no_store(response: JsonResponse) -> JsonResponse:
    response["Cache-Control"] = "no-store"
    response["Pragma"] = "no-cache"
    return response


def error_response(error: OAuthError) -> JsonResponse:
    body = {"error": error.error}
    if error.description:
        body["error_description"] = error.description
    response = no_store(JsonResponse(body, status=error.status))
    if error.error == "invalid_client":
        response["WWW-Authenticate"] = 'Basic realm="reviewer"'
    if error.retry_after:
        response["Retry-After"] = str(error.retry_after)
    return response
