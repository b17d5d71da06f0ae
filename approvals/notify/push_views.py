"""The installable web app and push devices: the manifest, the service worker (served from the root so
its scope is the whole site), and "Your devices" → push: list, subscribe (the page's script posts the
browser's subscription), remove."""

import json

from django.http import HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.views.decorators.http import require_GET, require_POST

from approvals.models.notifications import PushSubscription
from approvals.notify import push
from approvals.services.push_devices import remove, subscribe
from lib.decorators import verified_required
from lib.errors import ServiceError, error_body

SERVICE_WORKER = """// Reviewer's service worker: shows a push notification and opens its page when tapped.
self.addEventListener("push", (event) => {
  let data = {};
  try { data = event.data ? event.data.json() : {}; } catch (error) { data = {}; }
  const title = typeof data.title === "string" ? data.title : "Reviewer";
  event.waitUntil(self.registration.showNotification(title, {
    body: typeof data.body === "string" ? data.body : "",
    tag: typeof data.tag === "string" ? data.tag : undefined,
    data: {url: typeof data.url === "string" ? data.url : "/"},
  }));
});
self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  const url = new URL(event.notification.data && event.notification.data.url || "/", self.location.origin);
  if (url.origin !== self.location.origin) { return; }  // only Reviewer's own pages
  event.waitUntil(self.clients.openWindow(url.href));
});
"""


@require_GET
def manifest(request):
    body = {
        "name": "Reviewer",
        "short_name": "Reviewer",
        "description": "Decide what AI agents may do.",
        "start_url": "/",
        "scope": "/",
        "display": "standalone",
        "background_color": "#ffffff",
        "theme_color": "#1f3a5f",
        "icons": [{"src": static("icons/reviewer.svg"), "sizes": "any", "type": "image/svg+xml"}],
    }
    return HttpResponse(json.dumps(body), content_type="application/manifest+json")


@require_GET
def service_worker(request):
    response = HttpResponse(SERVICE_WORKER, content_type="application/javascript")
    response["Service-Worker-Allowed"] = "/"
    response["Cache-Control"] = "no-cache"
    return response


@verified_required
@require_GET
def devices(request):
    """The push part of Your devices (the page loads it into its own section)."""
    context = {
        "devices": list(PushSubscription.objects.filter(user=request.user).order_by("created_at")),
        "push_key": push.application_server_key() if push.configured() else "",
    }
    return render(request, "approvals/_push_devices.html", context)


@verified_required
@require_POST
def subscribe_device(request):
    try:
        body = json.loads(request.body or b"{}")
        endpoint = str(body["endpoint"])
        keys = body.get("keys") or {}
    except (ValueError, KeyError, TypeError):
        return JsonResponse(error_body("bad_subscription", "not a push subscription"), status=400)
    try:
        device = subscribe(
            request.user,
            endpoint=endpoint,
            p256dh=str(keys.get("p256dh") or ""),
            auth=str(keys.get("auth") or ""),
            name=str(body.get("name") or ""),
            refusal=push.endpoint_refusal(endpoint),
        )
    except ServiceError as refusal:
        return JsonResponse(refusal.as_dict(), status=refusal.http_status)
    return JsonResponse({"device": device.pk, "name": device.name}, status=201)


@verified_required
@require_POST
def remove_device(request, device_id: int):
    try:
        remove(request.user, device_id)
    except ServiceError:
        pass  # already removed: the page shows what is left
    return redirect("accounts:devices")
