"""The admin app with Reviewer's site as its default (in INSTALLED_APPS instead of django.contrib.admin).
The site class is named by its dotted path, so it is imported only once the apps are ready."""

from django.contrib.admin.apps import AdminConfig


class ReviewerAdminConfig(AdminConfig):
    default_site = "reviewer.admin_site.ReviewerAdminSite"
