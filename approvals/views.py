from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from approvals import keys


@require_GET
def jwks(request):
    response = JsonResponse(keys.jwks())
    response["Cache-Control"] = "public, max-age=300"
    return response


@login_required
def queue(request):
    return HttpResponse("queue")
