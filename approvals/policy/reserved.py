"""Tool names Reviewer itself gives a meaning to. An agent asks for a standing grant with an approval
request for `reviewer.grant` (approvals/policy/grants.py): policy sees it like any tool, but it is
always decided by people."""

GRANT_TOOL = "reviewer.grant"
