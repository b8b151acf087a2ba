"""The admin dispatcher's gate: who calls, may they, from where, under which Host, and who owns shared objects.

http/router.py runs the checks of docs/API.md ("Order of checks") and asks
each question here; app.py build_app makes the gate once from named parts
(the sessions, the client-address policy, the stored settings, the fleet's
primary) and hands it to AdminDispatcher, so the router never reaches into
the App.
"""

from contentnode.auth import scopes


class AdminGate:
    """settings(): the stored settings of the moment; replica_primary(): the primary's node id on
    a fleet replica, else None."""

    def __init__(self, sessions, addresses, settings, replica_primary):
        self._sessions, self._addresses = sessions, addresses
        self._settings, self._replica_primary = settings, replica_primary

    def authenticate(self, req) -> None:
        """req.user, req.session (or req.pending_session) from the session cookie, when valid."""
        self._sessions.attach(req)

    def must_enrol(self, user: dict, api_token) -> bool:
        """The two-factor policy requires a second factor this user has not set up yet."""
        return self._sessions.must_enrol(user, api_token)

    def authorize(self, user: dict, scope: str) -> bool:
        return scopes.allows(user, scope)

    def network_allowed(self, req) -> bool:
        """The admin allow list governs the admin host on the public side only."""
        return not req.via_admin_host or self._addresses.admin_allowed(req.client_ip)

    def admin_host(self) -> str | None:
        return self._settings().get("admin_host")

    def replica_primary(self) -> str | None:
        return self._replica_primary()
