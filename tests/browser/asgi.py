"""The real ASGI app (reviewer.asgi) plus static files, for Daphne in the browser tests: the pages need
their CSS, htmx and script, and reviewer.asgi serves no static files itself."""

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

from reviewer.asgi import application as reviewer_application

# django-stubs types the wrapped app as Django's ASGIHandler; the handler wraps any ASGI app.
application = ASGIStaticFilesHandler(reviewer_application)  # type: ignore[arg-type]
