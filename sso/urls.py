"""Single sign-on under /accounts/sso/ (reviewer/urls.py)."""

from django.urls import path

from sso import views

app_name = "sso"

urlpatterns = [
    path("", views.choose, name="choose"),
    path("callback", views.callback, name="callback"),
    path("step-up/<uuid:proposal_id>/", views.step_up, name="step_up"),
    path("<slug:tenant_slug>/", views.start, name="start"),
]
