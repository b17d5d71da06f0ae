from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("approvals.urls")),
    path("audit/", include("audit.urls")),
]
