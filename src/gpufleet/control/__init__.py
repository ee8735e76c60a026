"""The closed control loop: stages behind small Protocols, run in order against a world."""
