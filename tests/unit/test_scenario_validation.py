"""Scenario files: round trip, and errors that name the field and the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.cli.scenario_files import load_scenario
from gpufleet.domain.errors import ValidationError
from gpufleet.sim.builtin import default_scenario
from gpufleet.sim.scenario import dump_scenario


def test_default_scenario_round_trips_through_yaml(tmp_path: Path) -> None:
    sc = default_scenario(gpus=256, days=10)
    p = tmp_path / "s.yaml"
    p.write_text(dump_scenario(sc))
    assert load_scenario(p) == sc


def _broken(tmp_path: Path, old: str, new: str) -> Path:
    text = dump_scenario(default_scenario(gpus=256, days=10))
    assert old in text
    p = tmp_path / "broken.yaml"
    p.write_text(text.replace(old, new, 1))
    return p


def test_a_negative_number_names_the_field_and_line(tmp_path: Path) -> None:
    p = _broken(tmp_path, "gpus_per_replica: 4", "gpus_per_replica: -4")
    with pytest.raises(ValidationError) as e:
        load_scenario(p)
    assert e.value.field == "serving[0].gpus_per_replica"
    line = next(i for i, t in enumerate(p.read_text().splitlines(), 1) if "gpus_per_replica: -4" in t)
    assert e.value.location == f"{p}:{line}"


def test_an_unknown_sku_is_refused(tmp_path: Path) -> None:
    p = _broken(tmp_path, "sku: l40s", "sku: v100_imaginary")
    with pytest.raises(ValidationError) as e:
        load_scenario(p)
    assert e.value.field.startswith("pools[1]")
    assert "unknown sku" in e.value.message


def test_an_unknown_key_is_refused(tmp_path: Path) -> None:
    p = _broken(tmp_path, "days: 10", "dayz: 10")
    with pytest.raises(ValidationError) as e:
        load_scenario(p)
    assert e.value.field in {"days", "dayz"}


def test_invalid_yaml_gives_the_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text("name: x\npools: [\n  - sku: h100_80gb\n")
    with pytest.raises(ValidationError) as e:
        load_scenario(p)
    assert e.value.field == "yaml"
    assert e.value.location is not None and e.value.location.startswith(str(p))


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as e:
        load_scenario(tmp_path / "nope.yaml")
    assert "does not exist" in str(e.value)
