"""reviewer/static_files.py: with DEBUG off, collectstatic's output answers /static/ before Django does:
hashed names cached for good, other names for a minute, the compressed copy to a browser that accepts
it, and a name it does not have refused without reaching the application."""

import gzip

import pytest
from channels.testing import HttpCommunicator

from reviewer.static_files import with_static_files

pytestmark = pytest.mark.database_independent

STYLESHEET = b"body { color: black; }\n" * 200
HASHED = "/static/reviewer.3f2a9c1b7d4e.css"


async def application(scope, receive, send):
    """Stands in for Django: whatever reaches it says so."""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"the application"})


@pytest.fixture
def served(tmp_path):
    (tmp_path / "reviewer.3f2a9c1b7d4e.css").write_bytes(STYLESHEET)
    (tmp_path / "reviewer.3f2a9c1b7d4e.css.gz").write_bytes(gzip.compress(STYLESHEET))
    (tmp_path / "reviewer.css").write_bytes(STYLESHEET)
    return with_static_files(application, root=tmp_path, prefix="/static/")


async def get(app, path: str, *headers: tuple[bytes, bytes]) -> dict:
    communicator = HttpCommunicator(app, "GET", path, headers=[(b"host", b"testserver"), *headers])
    response: dict = dict(await communicator.get_response(timeout=10))
    response["headers"] = {name.decode(): value.decode() for name, value in response["headers"]}
    return response


async def test_a_hashed_name_is_served_and_cached_for_good(served):
    response = await get(served, HASHED)

    assert response["status"] == 200 and response["body"] == STYLESHEET
    assert response["headers"]["content-type"].startswith("text/css")
    assert response["headers"]["cache-control"] == "max-age=315360000, public, immutable"


async def test_a_browser_that_accepts_gzip_gets_the_compressed_copy(served):
    response = await get(served, HASHED, (b"accept-encoding", b"gzip, deflate"))

    assert response["status"] == 200 and response["headers"]["content-encoding"] == "gzip"
    assert gzip.decompress(response["body"]) == STYLESHEET
    assert response["headers"]["vary"] == "Accept-Encoding"


async def test_a_name_without_a_hash_is_cached_for_a_minute_only(served):
    response = await get(served, "/static/reviewer.css")

    assert response["status"] == 200 and response["body"] == STYLESHEET
    assert response["headers"]["cache-control"] == "max-age=60, public"


async def test_an_unknown_static_name_is_refused_without_reaching_the_application(served):
    response = await get(served, "/static/missing.3f2a9c1b7d4e.css")

    assert response["status"] == 404 and response["body"] != b"the application"


async def test_every_other_path_goes_to_the_application(served):
    response = await get(served, "/queue/")

    assert response["status"] == 200 and response["body"] == b"the application"
