from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.core.exceptions import ImproperlyConfigured
from django.urls import include, path
from django_otp.admin import OTPAdminSite

from accounts import views as account_views
from health import metrics as health_metrics

# The admin configures who may release payments: it must ask for a second factor like every page
# (reviewer/apps.py sets the site). A settings module that lists django.contrib.admin instead fails here.
if not isinstance(admin.site, OTPAdminSite):
    raise ImproperlyConfigured(
        "INSTALLED_APPS lists reviewer.apps.ReviewerAdminConfig, not django.contrib.admin"
    )

urlpatterns = [
    path("admin/login/", account_views.admin_sign_in),  # one sign-in form for everyone (accounts/views.py)
    path("admin/", admin.site.urls),
    path("accounts/login/", account_views.login_view, name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/sso/", include("sso.urls")),  # single sign-on (sso/urls.py)
    path("accounts/", include("accounts.urls")),
    path("", include("approvals.urls")),
    path("", include("oauth.urls")),  # the OAuth doors: TAC, CIBA, the server metadata (oauth/urls.py)
    path("audit/", include("audit.urls")),
    path("", include("authzen.urls")),  # OpenID AuthZEN access evaluation (authzen/)
    path("scim/v2/", include("sso.scim.views", namespace="scim")),  # provisioning (sso/scim/)
    # Where Prometheus looks by default: the audit counters plus this process's health (health/metrics.py).
    path("metrics", health_metrics.metrics, name="metrics"),
]
