"""HTTP plumbing: server, router, request and response. No business logic lives here."""
