from django.contrib.auth import views as auth_views
from django.urls import include, path

from tests.sso.oidc_idp import views

urlpatterns = [
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("_control/users", views.control_user),
    path("_control/clients", views.control_client),
]
