"""How a page shows a value an agent sent: as text, capped (and saying so when cut), a key as a label.
Agent text is untrusted and can be long. Money is approvals/policy/headline.py's `money`."""

import json

# Agent text is untrusted and can be long: cap what a page shows and say so when it is cut.
TEXT_CAP = 2000
EXCERPT_CAP = 600


def capped(value, limit=TEXT_CAP) -> dict:
    text = display_text(value)
    return {"text": text[:limit], "truncated": len(text) > limit, "length": len(text)}


def display_text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def label_text(key: str) -> str:
    return str(key).replace("_", " ").replace(".", " › ").strip().capitalize() or "(unnamed)"
