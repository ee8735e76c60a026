"""The simulated world: a deterministic discrete-event engine, a fleet, scenarios and trace loaders."""
