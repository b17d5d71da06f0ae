"""The one error type and the one error body.

Every refusal Reviewer answers is a ServiceError (or a subclass): the services' refusals, and the
agent-facing parsers' (`HostileInput` in approvals/agent_api/wire.py, `PushError` in
approvals/a2a/push.py, both IntakeErrors). Each carries a stable `code` (used by the API, the socket and
the tests), a message, and the dotted path of the input at fault (`field`, or None). Whatever answers
one (the REST API, the push webhook, the decision wait, the sockets, the overload guard, the pages'
JSON) builds the body with `error_body`: `{"error": {"code": ..., "message": ..., "field": ...}}`."""


class ServiceError(Exception):
    http_status = 400

    def __init__(self, code: str, message: str, field: str | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field

    def as_dict(self) -> dict:
        return error_body(self.code, self.message, self.field)


class IntakeError(ServiceError):
    http_status = 400


class HaltedError(ServiceError):
    http_status = 503


class QuotaExceeded(ServiceError):
    """Over an intake quota: 429, and the agent may try again after `retry_after` seconds."""

    http_status = 429

    def __init__(self, code: str, message: str, *, retry_after: int):
        super().__init__(code, f"{message}; retry after {retry_after} s")
        self.retry_after = retry_after


class NotFound(ServiceError):
    http_status = 404


class VoteRefused(ServiceError):
    http_status = 403


class ActionRefused(ServiceError):
    """A person may not do this (other than vote): revoke, note a compensation, edit, reset devices."""

    http_status = 403


class RevokeRefused(ActionRefused):
    pass


class CompensationRefused(ActionRefused):
    pass


class EditRefused(ActionRefused):
    pass


class DeviceResetRefused(ActionRefused):
    pass


class FactorChangeRefused(ActionRefused):
    """A change to a person's factors without a fresh confirmation by a strong enough factor."""


class ConsumeRefused(ServiceError):
    http_status = 409


class Conflict(ServiceError):
    http_status = 409


class ConfigRefused(ServiceError):
    http_status = 403


class PolicyInvalid(ServiceError):
    """A draft that cannot be stored; `errors` maps each field to what is wrong with it."""

    def __init__(self, errors: dict[str, str]):
        field = next(iter(errors))
        message = "; ".join(f"{name}: {text}" for name, text in errors.items())
        super().__init__("invalid_policy", message, field)
        self.errors = errors


class BreakGlassRefused(ActionRefused):
    """A break-glass release this person may not make now (not named, over budget or cap, ...)."""


class PostHocReviewRefused(ActionRefused):
    pass


def error_body(code: str, message: str, field: str | None = None) -> dict:
    return {"error": {"code": code, "message": message, "field": field}}
