"""PostgreSQL's plan of a queryset, for the tests that check a query reads an index."""

from django.db import connection


def plan_of(queryset) -> str:
    """EXPLAIN of the queryset's SQL, its lines joined."""
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())
