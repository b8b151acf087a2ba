"""GET /api/panel: the whole dashboard in one answer, one member per readable section.

Resource areas declare PANEL_SECTIONS [(name, scope, builder)]; api/__init__.py
gathers them and the admin context (api/context.py) holds the list. A section appears only for users
holding its scope.
"""

from contentnode.api.login import session_user
from contentnode.auth import scopes
from contentnode.http.router import Route


def get_panel(req):
    answer = {"user": session_user(req)}
    for name, scope, builder in req.app.panel_sections:
        if scopes.allows(req.user, scope):
            answer[name] = builder(req)
    return answer


ROUTES = [Route("GET", "/api/panel", "login", get_panel)]
