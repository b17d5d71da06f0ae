"""Settings of the benchmark server only (bench/r3_intake_http.py): production settings with
bench/urls.py, which adds the bare baseline endpoint. Never used by the product."""

from reviewer.settings import *  # noqa: F403

ROOT_URLCONF = "bench.urls"

# One agent posts as fast as the benchmark's clients can, far past one real agent's intake quota: the
# limits are raised out of the way; their cost (one lock and one UPDATE per intake) is still measured.
AGENT_INTAKE_BURST = AGENT_INTAKE_PER_MINUTE = AGENT_OPEN_PROPOSALS = 10**9
TENANT_INTAKE_BURST = TENANT_INTAKE_PER_MINUTE = TENANT_OPEN_PROPOSALS = 10**9
