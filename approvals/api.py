"""The agent-facing REST API, /api/v1/ (filled in by the A2A work)."""

from ninja import NinjaAPI

api = NinjaAPI(title="Reviewer agent API", version="1", urls_namespace="api")
