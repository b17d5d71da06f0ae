"""Plain SQL for the hot path (intake's one read): the text is built once per process from the models'
own names, so the ORM does not rebuild an expression tree on every request. Only quoted names and
placeholders go into the text; every value is a parameter."""

from collections.abc import Callable

from django.db import connection


def quoted_names(model) -> tuple[str, Callable[[str], str]]:
    """The model's table, and a function giving a field's column, both quoted for this database."""
    quote = connection.ops.quote_name
    return quote(model._meta.db_table), lambda field: quote(model._meta.get_field(field).column)
