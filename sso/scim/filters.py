"""SCIM filters (RFC 7644 3.4.2.2) as django-scim2 runs them: scim2-filter-parser turns a filter into SQL
over these columns, and the tenant's condition is added to every query (the token's tenant only)."""

from django_scim import exceptions
from django_scim.filters import FilterQuery
from scim2_filter_parser.parser import SCIMParserError

from sso.models import ScimGroup, ScimUser


class _TenantFilterQuery(FilterQuery):
    @classmethod
    def search(cls, filter_query, request=None):
        """A filter the parser refuses is RFC 7644's `invalidFilter` (the library answers no type)."""
        try:
            return super().search(filter_query, request)
        except (ValueError, SCIMParserError) as error:
            raise exceptions.BadRequestError(
                f"the filter is not valid: {error}", scim_type="invalidFilter"
            ) from None

    @classmethod
    def get_extras(cls, q, request=None):
        return " AND tenant_id = %s", [request.scim_tenant.id]


class UserFilterQuery(_TenantFilterQuery):
    """What Okta (`userName eq "…"`) and Entra ID (`userName eq "…"`, `externalId eq "…"`) filter on."""

    model_getter = lambda: ScimUser  # noqa: E731 (django-scim2 calls a getter)
    attr_map = {
        ("userName", None, None): "user_name",
        ("externalId", None, None): "external_id",
        ("id", None, None): "scim_id",
        ("active", None, None): "active",
    }


class GroupFilterQuery(_TenantFilterQuery):
    model_getter = lambda: ScimGroup  # noqa: E731
    attr_map = {
        ("displayName", None, None): "display_name",
        ("externalId", None, None): "external_id",
        ("id", None, None): "scim_id",
    }
