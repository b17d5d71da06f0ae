"""Single sign-on under /accounts/sso/ (reviewer/urls.py)."""

from django.urls import path

from sso import views
from sso.saml.views import SamlAssertionConsumer, SamlLogin, SamlMetadata

app_name = "sso"

urlpatterns = [
    path("", views.choose, name="choose"),
    path("callback", views.callback, name="callback"),
    path("step-up/<uuid:proposal_id>/", views.step_up, name="step_up"),
    path("saml/<slug:tenant_slug>/login/", SamlLogin.as_view(), name="saml_login"),
    path("saml/<slug:tenant_slug>/acs/", SamlAssertionConsumer.as_view(), name="saml_acs"),
    path("saml/<slug:tenant_slug>/metadata/", SamlMetadata.as_view(), name="saml_metadata"),
    path("<slug:tenant_slug>/", views.start, name="start"),
]
