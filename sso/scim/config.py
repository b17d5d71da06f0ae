"""What the ServiceProviderConfig endpoint tells clients this server supports (RFC 7643 section 5)."""

from django_scim.models import SCIMServiceProviderConfig


class ServiceProviderConfig(SCIMServiceProviderConfig):
    def to_dict(self):
        document = super().to_dict()
        document["filter"] = {"supported": True, "maxResults": 200}
        document["changePassword"] = {"supported": False}  # people sign in at the provider
        document["meta"]["location"] = self.request.build_absolute_uri(self.location)
        return document
