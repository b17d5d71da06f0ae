from django.urls import path

from oauth import metadata
from oauth.ciba import views as ciba
from oauth.tac import views as tac

app_name = "oauth"

urlpatterns = [
    path("oauth/txn-authorization", tac.transaction_authorization, name="txn_authorization"),
    path("bc-authorize", ciba.backchannel_authentication, name="backchannel"),
    path("oauth/token", ciba.token, name="token"),
    path(".well-known/oauth-authorization-server", metadata.authorization_server, name="metadata"),
]
