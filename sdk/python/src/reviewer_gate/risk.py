"""Which tool calls need a human: name patterns, with a risk hint by tool name as the default.

The hint is the keyword classifier of Reviewer's oversight notes (seeds/hitl-plugin-risk-classifier):
the tool name, lowercased, is searched for each keyword as a substring; three groups are high risk
and the first that matches (shell first) names the kind of action. Every other name is low risk.
A name hint is a default, not a policy: Reviewer's policies decide what needs people; this only
decides which calls are sent to Reviewer at all, so list the tools you know in `gated`/`open`.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

RISK_KEYWORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("shell_exec", ("shell", "exec", "bash", "run_command", "terminal")),
    ("file_write", ("write", "edit", "delete", "remove", "rm_", "mv_", "move", "create_file")),
    ("external_api_write", ("http_post", "http_put", "http_delete", "api_write", "post_", "put_", "delete_")),
)


def risk_hint(tool_name: str) -> str | None:
    """ "shell_exec", "file_write", "external_api_write", or None for a name that matches no keyword."""
    name = tool_name.lower()
    for kind, keywords in RISK_KEYWORDS:
        if any(keyword in name for keyword in keywords):
            return kind
    return None


@dataclass(frozen=True)
class GatingRules:
    """`open` patterns are never gated, `gated` patterns always are (fnmatch, case-sensitive); a name
    that matches neither is gated when `use_risk_hint` and the risk hint names a kind."""

    gated: tuple[str, ...] = ()
    open: tuple[str, ...] = ()
    use_risk_hint: bool = True

    @classmethod
    def of(
        cls,
        gated: Iterable[str] = (),
        open: Iterable[str] = (),  # noqa: A002
        use_risk_hint: bool = True,
    ) -> "GatingRules":
        return cls(tuple(gated), tuple(open), use_risk_hint)

    def is_gated(self, tool_name: str) -> bool:
        if any(fnmatchcase(tool_name, pattern) for pattern in self.open):
            return False
        if any(fnmatchcase(tool_name, pattern) for pattern in self.gated):
            return True
        return self.use_risk_hint and risk_hint(tool_name) is not None
