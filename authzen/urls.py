from django.urls import path

from authzen import views

app_name = "authzen"

urlpatterns = [
    path("access/v1/evaluation", views.evaluation, name="evaluation"),
    path("access/v1/evaluations", views.evaluations, name="evaluations"),
    path("access/v1/requests", views.access_request, name="access_request"),
    path("access/v1/requests/<str:task_id>", views.task_status, name="task_status"),
    path(".well-known/authzen-configuration", views.configuration, name="configuration"),
]
