"""GET /api/panel: the whole dashboard in one answer, one member per readable section.

Resource areas register their sections with @panel_section(name, scope); a
section appears only for users holding its scope.
"""

from contentnode.auth.users import public_user
from contentnode.http.router import Route

_SECTIONS = []  # (name, scope, builder)


def panel_section(name: str, scope: str):
    def register(builder):
        _SECTIONS.append((name, scope, builder))
        return builder
    return register


def get_panel(req):
    answer = {"user": public_user(req.user)}
    for name, scope, builder in _SECTIONS:
        if req.app.scopes.allows(req.user, scope):
            answer[name] = builder(req)
    return answer


ROUTES = [Route("GET", "/api/panel", "login", get_panel)]
