"""SCIM filters (RFC 7644 3.4.2.2) as django-scim2 runs them: scim2-filter-parser turns a filter into SQL
over these columns, and the tenant's condition is added to every query (the token's tenant only).

A resource's `id` is a string to a SCIM client (RFC 7643 3.1), so `id eq "not-a-uuid"` is a filter
that matches nothing, not an error. The column is a UUID, which PostgreSQL will not compare with such a
text (the query fails), and which SQLite stores as 32 hex digits without the dashes a client sends, so
the filter compares the id as the text SCIM shows (`ID_AS_TEXT`): every operator then means on the id
what it means on any string attribute."""

from django.db import connection
from django_scim import exceptions
from django_scim.filters import FilterQuery
from scim2_filter_parser.parser import SCIMParserError
from scim2_filter_parser.queries.sql import SQLQuery

from sso.models import ScimGroup, ScimUser

ID_COLUMN = "scim_id"
# The id column as SCIM writes the id: lower-case hex in 8-4-4-4-12 groups.
ID_AS_TEXT = {
    "postgresql": f"CAST({ID_COLUMN} AS TEXT)",
    # Django keeps a UUID on SQLite as 32 hex digits: the dashes are put back between the groups.
    "sqlite": "("
    + " || '-' || ".join(
        f"substr({ID_COLUMN}, {start}, {length})"
        for start, length in ((1, 8), (9, 4), (13, 4), (17, 4), (21, 12))
    )
    + ")",
}


class _IdAsTextQuery(SQLQuery):
    """scim2-filter-parser's SQL query, comparing the id as text (the module docstring says why)."""

    def __init__(self, filter_query, table_name, attr_map, joins=()):
        as_text = ID_AS_TEXT[connection.vendor]
        columns = {name: as_text if column == ID_COLUMN else column for name, column in attr_map.items()}
        super().__init__(filter_query, table_name, columns, joins)


class _TenantFilterQuery(FilterQuery):
    query_class = _IdAsTextQuery

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
        ("id", None, None): ID_COLUMN,
        ("active", None, None): "active",
    }


class GroupFilterQuery(_TenantFilterQuery):
    model_getter = lambda: ScimGroup  # noqa: E731
    attr_map = {
        ("displayName", None, None): "display_name",
        ("externalId", None, None): "external_id",
        ("id", None, None): ID_COLUMN,
    }
