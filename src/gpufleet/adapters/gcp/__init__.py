"""The Google Cloud adapter: Compute Engine reservations behind the provider port (docs/providers.md)."""
