"""Single sign-on under /accounts/sso/ (reviewer/urls.py)."""

from django.urls import path

from sso import views

app_name = "sso"

urlpatterns = [
    path("", views.choose, name="choose"),
    path("callback", views.callback, name="callback"),
    path("<slug:tenant_slug>/", views.start, name="start"),
]
