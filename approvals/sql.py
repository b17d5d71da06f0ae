"""Kept for the modules that still import these names from here; their home is approvals/storage/rows.py."""

from approvals.storage.rows import (
    ModelColumns,
    insert_sql,
    insert_statement,
    model_columns,
    quoted_names,
    stored,
    update_sql,
    update_statement,
)

__all__ = [
    "ModelColumns",
    "insert_sql",
    "insert_statement",
    "model_columns",
    "quoted_names",
    "stored",
    "update_sql",
    "update_statement",
]
