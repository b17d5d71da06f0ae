"""Reviewer pages (the workspace work fills these in)."""

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


@login_required
def watching(request):
    return HttpResponse("watching")


@login_required
def detail(request, proposal_id):
    return HttpResponse("detail")


@login_required
def decide(request, proposal_id):
    return HttpResponse("decide")


@login_required
def edit(request, proposal_id):
    return HttpResponse("edit")


@login_required
def revoke(request, proposal_id):
    return HttpResponse("revoke")


@login_required
def enroll(request):
    return HttpResponse("enroll")


def login_view(request):
    return HttpResponse("login")
