"""The Django wiring of AgentLab: settings, URLs, the ASGI application, the API's
error handling and middleware, health and metrics endpoints, the channel layer,
the Celery app and what a server does at its start (docs/architecture.md#the-package-map).

The product's code lives in the apps (``turns``, ``evaluation``, ``apikeys``,
``monitoring``, ``common``) and the framework-free core in ``agentlab``; this
package only puts them together (cookiecutter-django's ``config/``).
"""
