"""The cost decisions the service asks for beyond its books: idle waste, the one definition (``cost/waste.py``).
Worlds reach the decision packages through control/ (the import contract in pyproject.toml)."""

from gpufleet.cost.waste import IdleWaste, idle_waste

__all__ = ["IdleWaste", "idle_waste"]
