"""Settings of the benchmark server only (bench/r3_intake_http.py): production settings with
bench/urls.py, which adds the bare baseline endpoint. Never used by the product."""

from reviewer.settings import *  # noqa: F403

ROOT_URLCONF = "bench.urls"
