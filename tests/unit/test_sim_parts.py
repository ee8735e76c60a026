"""The simulator is composed parts, not mixins: no class in sim/ inherits from a mixin or from more than one
non-Protocol base, and no class body re-declares another's attributes for the type checker (the mixin pattern)."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path
from typing import Generic, Protocol

import gpufleet.sim
from gpufleet.sim.world import World

SIM = Path(gpufleet.sim.__file__).parent


def _sim_classes() -> list[type]:
    out: list[type] = []
    for info in pkgutil.iter_modules([str(SIM)]):
        mod = importlib.import_module(f"gpufleet.sim.{info.name}")
        out += [c for _, c in inspect.getmembers(mod, inspect.isclass) if c.__module__ == mod.__name__]
    return out


def test_no_sim_class_is_or_uses_a_mixin_or_inherits_from_two_concrete_bases() -> None:
    classes = _sim_classes()
    assert World in classes and len(classes) > 10
    for cls in classes:
        assert not cls.__name__.endswith("Mixin"), cls
        concrete = [b for b in cls.__bases__ if b not in (object, Protocol, Generic) and Protocol not in b.__bases__]
        assert not any(b.__name__.endswith("Mixin") for b in cls.__bases__), cls
        assert len(concrete) <= 1, f"{cls.__qualname__} inherits from {[b.__name__ for b in concrete]}"


def test_world_has_no_base_but_object() -> None:
    assert World.__bases__ == (object,)


def test_no_sim_class_body_declares_attributes_only_for_the_type_checker() -> None:
    """``if TYPE_CHECKING:`` inside a class body is how the mixins declared the world's attributes they used."""
    for path in sorted(SIM.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for stmt in cls.body:
                if isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test):
                    raise AssertionError(
                        f"{path.name}:{stmt.lineno}: {cls.name} declares attributes under TYPE_CHECKING"
                    )
