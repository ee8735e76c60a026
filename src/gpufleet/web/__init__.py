"""The FinOps dashboard: static pages, a bundled chart library, and JSON routes a FastAPI app mounts."""

from gpufleet.web.dashboard import PAGES, mount_dashboard
from gpufleet.web.data import CostDashboardData, DashboardData, Scope

__all__ = ["PAGES", "CostDashboardData", "DashboardData", "Scope", "mount_dashboard"]
