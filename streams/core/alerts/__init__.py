"""A device's alert steps over attribution events, and the episodes they share."""
