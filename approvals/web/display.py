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


# Words a label keeps in capitals ("mcp_client" reads "MCP client", not "Mcp client").
ACRONYMS = {"mcp", "api", "id", "url", "uri", "iban", "pii", "otp", "sso", "a2a", "http", "https", "ip"}


def label_text(key: str) -> str:
    words = str(key).replace("_", " ").replace(".", " › ").split()
    if not words:
        return "(unnamed)"
    shown = [word.upper() if word.lower() in ACRONYMS else word for word in words]
    if shown[0] == words[0]:
        shown[0] = words[0][:1].upper() + words[0][1:]
    return " ".join(shown)


def fact_text(value) -> str:
    """A fact the agent states beside the action (a consequence such as the MCP gateway's `mcp_client`,
    `{"name": "claude-code", "title": "Claude Code", "version": "1.2"}`) as a reader reads it:
    "Name: claude-code · Title: Claude Code · Version: 1.2". A flat object or list only; anything
    nested stays JSON, exact."""
    if isinstance(value, dict) and value and all(not isinstance(v, dict | list) for v in value.values()):
        return " · ".join(f"{label_text(k)}: {display_text(v)}" for k, v in value.items())
    if isinstance(value, list) and value and all(not isinstance(v, dict | list) for v in value):
        return ", ".join(display_text(v) for v in value)
    return display_text(value)
