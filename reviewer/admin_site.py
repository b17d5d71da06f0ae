"""The admin site: django-otp's, so the admin (which configures who may release payments) asks for a
verified second factor like every page. Named "admin" (OTPAdminSite calls itself "otpadmin"), so its URLs
stay admin:*. reviewer/apps.py makes it the default site, the supported way (AdminConfig.default_site)."""

from django_otp.admin import OTPAdminSite


class ReviewerAdminSite(OTPAdminSite):
    def __init__(self, name: str = "admin"):
        super().__init__(name)
