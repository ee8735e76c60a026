"""Typer commands. Each ``cmd_*.py`` module registers top-level commands and each ``bench_*.py`` module
registers a ``gpufleet bench`` subcommand, through a ``register(app)`` function; main.py discovers them."""
