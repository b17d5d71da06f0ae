"""django-scim2's discovery views, with the `totalResults` RFC 7644 (section 3.4.2) requires of every
list response, which its ResourceTypes and Schemas lists leave out; and its URL patterns with them."""

import json

from django.http import HttpResponse
from django.urls import re_path
from django.views.decorators.csrf import csrf_exempt
from django_scim import urls as scim_urls
from django_scim import views
from django_scim.constants import SCIM_CONTENT_TYPE


def scim_error(status: int, detail: str) -> HttpResponse:
    body = {
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:Error"],
        "status": str(status),
        "detail": detail,
    }
    return HttpResponse(json.dumps(body), content_type=SCIM_CONTENT_TYPE, status=status)


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
