"""gpufleet: a control plane that plans, buys, places, packs, scales and charges for GPU capacity.

The package is layered (checked by import-linter, see pyproject):

    cli -> api/report -> service/bench -> sim/adapters -> control -> capabilities -> domain

Capability packages (forecast, procure, place, schedule, autoscale, cost) hold pure decision code;
the simulator and the service call the same code against different worlds.
"""

from gpufleet import _native

__version__ = "0.1.0"

# Before any other module of the package is imported: use the compiled hot path only if it matches the source.
_native.guard()
