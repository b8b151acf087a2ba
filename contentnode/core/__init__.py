"""Domain logic: knows nothing of HTTP servers or requests, so it can be tested on its own."""
