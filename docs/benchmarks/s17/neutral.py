"""`python -m gpufleet simulate ...` with the planned-run decision off (PlannedRunReserve=None): the hook's neutrality."""

import sys

from gpufleet.cli.main import main
from gpufleet.sim import run as simrun

orig = simrun.LOOPS["gpufleet"]


def patched(sc, seed):
    loop = orig(sc, seed)
    loop.procurer.planned = None
    return loop


simrun.LOOPS["gpufleet"] = patched
simrun.gpufleet_loop = patched

sys.argv = ["gpufleet", *sys.argv[1:]]
main()
