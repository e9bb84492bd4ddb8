from django.urls import path

from mysite import views

urlpatterns = [
    path("", views.index, name="index"),
    path("form/", views.form, name="form"),
    path("api/echo/", views.api_echo, name="api-echo"),
    path("upload/", views.upload, name="upload"),
    path("upload/raw/", views.upload_raw, name="upload-raw"),
    path("stream/", views.stream, name="stream"),
    path("static/<path:name>", views.static_file, name="static"),
    path("sleep/", views.sleep, name="sleep"),
    path("outbound/", views.outbound, name="outbound"),
]
