"""OpenID CIBA Core 1.0 with RFC 9396 RAR, poll mode: `grant` takes a back-channel request in and
answers the token endpoint's CIBA grant; `views` are the two endpoints."""
