"""The command line imports only the module of the command it runs; its name tables match what the modules
register (a new command module not in the tables fails here)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import typer

from gpufleet.cli.main import BENCHES, COMMANDS, all_modules, modules_for


def _registered(module: str) -> set[str]:
    t = typer.Typer()
    importlib.import_module(f"gpufleet.cli.{module}").register(t)
    names = {c.name or c.callback.__name__.replace("_", "-") for c in t.registered_commands if c.callback}
    return names | {g.name for g in t.registered_groups if g.name}


def test_tables_name_every_command_each_module_registers() -> None:
    commands, benches = all_modules()
    for table, modules in ((COMMANDS, commands), (BENCHES, benches)):
        registered = {name: module for module in modules for name in _registered(module)}
        assert registered == table
        assert set(table.values()) == set(modules)


def test_a_named_command_needs_its_module_only_and_anything_else_needs_all() -> None:
    everything = all_modules()
    assert modules_for(["token", "list"]) == (["cmd_token"], [])
    assert modules_for(["bench", "procure-loop", "--seeds", "1-3"]) == ([], ["bench_procure"])
    for argv in ([], ["--help"], ["simulat"], ["bench"], ["bench", "nope"], ["bench", "--help"]):
        assert modules_for(argv) == everything


def test_a_light_command_does_not_import_the_simulator() -> None:
    code = (
        "import sys\n"
        "sys.argv = ['gpufleet', 'token', '--help']\n"
        "from gpufleet.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
        "print(sorted(m for m in ('gpufleet.sim', 'gpufleet.forecast', 'scipy', 'pandas') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "[]"
