"""Compliance pages (/audit/<tenant slug>/...) and the Prometheus endpoint (/audit/metrics)."""

from django.urls import path

from audit.web import views

app_name = "audit"

urlpatterns = [
    path("", views.index, name="index"),
    path("metrics", views.prometheus, name="prometheus"),
    path("reviewer-verify/<str:filename>", views.verifier_download, name="verifier_wheel"),
    path("<slug:tenant>/", views.tenant_home, name="tenant"),
    path("<slug:tenant>/events/", views.events, name="events"),
    path("<slug:tenant>/metrics/", views.metrics_page, name="metrics"),
    path("<slug:tenant>/exports/", views.export, name="export"),
    path("<slug:tenant>/exports/<uuid:job_id>/", views.export_job, name="export_job"),
    path("<slug:tenant>/exports/<uuid:job_id>/download", views.export_download, name="export_download"),
    path("<slug:tenant>/proposals/<uuid:proposal_id>/", views.evidence_page, name="evidence"),
    path(
        "<slug:tenant>/proposals/<uuid:proposal_id>/evidence.json", views.evidence_json, name="evidence_json"
    ),
    path("<slug:tenant>/proposals/<uuid:proposal_id>/evidence.pdf", views.evidence_pdf, name="evidence_pdf"),
]
