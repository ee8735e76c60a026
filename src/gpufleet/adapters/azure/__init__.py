"""Azure: capacity reservations behind the provider port (docs/providers.md, "The Azure adapter")."""
