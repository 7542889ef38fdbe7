"""The web console at ``/console``: plain HTML, CSS and JavaScript shipped in the package,
and the few read-only JSON and server-sent-event routes its pages need (docs/console.md).

Every action of the console is an API method (``POST /v1/<name>``) called by the page
with the principal's bearer token; the routes here only read, searched and paged on the
server, and show each principal only what the API's rights let it see.
"""

from .routes import console_routes

__all__ = ["console_routes"]
