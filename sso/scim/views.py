"""django-scim2's views and URL patterns, with what Reviewer adds: request bodies read under
sso/scim/body.py's limits, an id that is not a UUID answered as one that names nothing, every error's
`status` a string as RFC 7644 (section 3.12) writes it (the library's is a number), and the
`totalResults` RFC 7644 (section 3.4.2) requires of every list response, which its ResourceTypes and
Schemas lists leave out."""

import json
import uuid

from django.http import HttpResponse
from django.urls import re_path
from django.utils.decorators import method_decorator
from django.views.decorators.csrf import csrf_exempt
from django_scim import exceptions, views
from django_scim import urls as scim_urls
from django_scim.constants import SCIM_CONTENT_TYPE

from sso.scim import body


def scim_error(status: int, detail: str) -> HttpResponse:
    body = {
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:Error"],
        "status": str(status),
        "detail": detail,
    }
    return HttpResponse(json.dumps(body), content_type=SCIM_CONTENT_TYPE, status=status)


def _status_as_string(response: HttpResponse) -> HttpResponse:
    if response.status_code < 400 or not response.content or response["Content-Type"] != SCIM_CONTENT_TYPE:
        return response
    document = json.loads(response.content)
    if isinstance(document, dict) and isinstance(document.get("status"), int):
        document["status"] = str(document["status"])
        response.content = json.dumps(document)
    return response


# Overriding dispatch drops the library's CSRF exemption of it (as_view copies the attributes of the
# class's own dispatch), so it is restated: SCIM takes a bearer token and no cookie.
@method_decorator(csrf_exempt, name="dispatch")
class _ReviewerRules(views.SCIMView):
    def dispatch(self, request, *args, **kwargs):
        declared = request.META.get("CONTENT_LENGTH") or "0"
        if declared.isdigit() and int(declared) > body.MAX_BODY_BYTES:
            # Before the body is read, and before Django refuses it past DATA_UPLOAD_MAX_MEMORY_SIZE.
            return _status_as_string(scim_error(413, body.too_large().detail))
        return _status_as_string(super().dispatch(request, *args, **kwargs))

    def load_body(self, raw):
        return body.parse(raw)

    def get_object(self):
        value = self.kwargs.get(self.lookup_url_kwarg)
        try:
            uuid.UUID(value or "")
        except ValueError:
            if value is not None:  # no id at all is the library's to answer
                raise exceptions.NotFoundError(value) from None
        return super().get_object()


class UsersView(_ReviewerRules, views.UsersView):
    pass


class GroupsView(_ReviewerRules, views.GroupsView):
    pass


class UserSearchView(_ReviewerRules, views.UserSearchView):
    pass


class GroupSearchView(_ReviewerRules, views.GroupSearchView):
    pass


def _as_complete_list(response):
    if response.status_code == 404:
        return scim_error(404, "no such resource type or schema")
    if response.status_code != 200:
        return response
    document = json.loads(response.content)
    if "Resources" in document:
        count = len(document["Resources"])
        document.update({"totalResults": count, "itemsPerPage": count, "startIndex": 1})
        response.content = json.dumps(document)
    return response


class ResourceTypesView(views.ResourceTypesView):
    def get(self, request, *args, **kwargs):
        return _as_complete_list(super().get(request, *args, **kwargs))


class SchemasView(views.SchemasView):
    def get(self, request, *args, **kwargs):
        return _as_complete_list(super().get(request, *args, **kwargs))


class NotImplementedHere(views.SCIMView):
    """The root, /.search across types, /Me and /Bulk: 501 with SCIM's error body (RFC 7644 3.12)."""

    implemented = False

    def status_501(self, request, *args, **kwargs):
        return scim_error(501, "not implemented by this server: see /ServiceProviderConfig")


@csrf_exempt
def not_found(request, *args, **kwargs):
    return scim_error(404, f"no SCIM endpoint at {request.path}")


app_name = "scim"
_REPLACED = {
    "users": UsersView.as_view(),
    "groups": GroupsView.as_view(),
    "users-search": UserSearchView.as_view(),
    "groups-search": GroupSearchView.as_view(),
    "resource-types": ResourceTypesView.as_view(),
    "schemas": SchemasView.as_view(),
    **{name: NotImplementedHere.as_view() for name in ("root", "search", "me", "bulk")},
}
urlpatterns = [
    re_path(pattern.pattern.regex.pattern, _REPLACED[pattern.name], name=pattern.name)
    if pattern.name in _REPLACED
    else pattern
    for pattern in scim_urls.urlpatterns
] + [re_path(r"^.*$", not_found)]
