"""The A2A push webhook (filled in by the A2A work)."""

from django.http import HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST


@csrf_exempt
@require_POST
def push(request, agent_slug):
    return HttpResponse(status=501)
