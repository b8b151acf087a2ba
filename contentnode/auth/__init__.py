"""Who may do what: passwords, sessions, scopes and roles, rate limits."""
