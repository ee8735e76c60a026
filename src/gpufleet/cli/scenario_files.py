"""Scenarios as a user names them: a built-in by name, or a YAML file by path (read here, at the face; the
simulator only parses text: sim/scenario.py)."""

from __future__ import annotations

from pathlib import Path

from gpufleet.adapters.inputs import read_input_text
from gpufleet.domain.errors import ValidationError
from gpufleet.sim.builtin import BUILTIN_SCENARIOS
from gpufleet.sim.scenario import Scenario, parse_scenario_yaml


def load_scenario(path: str | Path) -> Scenario:
    """The scenario in the YAML file at ``path``; a bad file raises a ValidationError naming field, file and line."""
    return parse_scenario_yaml(read_input_text(path, "scenario"), source=str(path))


def resolve_scenario(name: str) -> Scenario:
    """A built-in scenario by name (``default``, ``steady``) or a scenario YAML file by path; a bad file raises
    a ValidationError naming the field and line."""
    if name in BUILTIN_SCENARIOS:
        return BUILTIN_SCENARIOS[name]()
    if not Path(name).exists():
        raise ValidationError(
            "--scenario", f"{name!r} does not exist (nor is it a built-in scenario: {', '.join(BUILTIN_SCENARIOS)})"
        )
    return load_scenario(name)
