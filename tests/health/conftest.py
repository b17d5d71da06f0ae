import pytest

from health.models import WorkerHeartbeat


@pytest.fixture(autouse=True)
def _no_heartbeat_left_by_other_tests(request):
    """A worker another module ran on the test database (tests/e2e) may have ticked after the last flush
    and before it stopped: each test here starts with no heartbeat but its own."""
    marker = request.node.get_closest_marker("django_db")
    if marker is None:
        return
    request.getfixturevalue("transactional_db" if marker.kwargs.get("transaction") else "db")
    WorkerHeartbeat.objects.all().delete()
