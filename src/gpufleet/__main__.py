"""``python -m gpufleet``: the same command line as the ``gpufleet`` script."""

from gpufleet.cli.main import main

main()
