"""The product's URLs plus one bare endpoint, for the benchmark server only (bench/settings.py): the
baseline R3 measures intake against. It lives here so it can never reach production's urls."""

import json

from django.db import connection
from django.http import JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from reviewer.urls import urlpatterns as product_urlpatterns

BARE_TABLE = "bench_bare_row"
INSERT = f"INSERT INTO {BARE_TABLE} (body) VALUES (%s) RETURNING id"  # noqa: S608 (a constant name)


@csrf_exempt
@require_POST
def bare_insert(request):
    """Parse the JSON body and insert it as one row: what any Django endpoint that writes costs."""
    body = json.loads(request.body)
    with connection.cursor() as cursor:
        cursor.execute(INSERT, [json.dumps(body)])
        (row_id,) = cursor.fetchone()
    return JsonResponse({"id": row_id}, status=201)


# Under /api/, so that it takes the agents' request slots as intake does (reviewer/overload.py): under
# people's smaller share, 8 clients got 503s on the baseline alone and R3's ratio read too high.
urlpatterns = [path("api/bench/bare-insert", bare_insert), *product_urlpatterns]
