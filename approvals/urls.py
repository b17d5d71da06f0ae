from django.urls import path

from approvals import views

app_name = "approvals"

urlpatterns = [
    path("", views.queue, name="queue"),
    path(".well-known/jwks.json", views.jwks, name="jwks"),
]
