"""Building the service Settings from CLI options over the environment, with errors as one clear line."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from typing import Any

import pydantic
from pydantic_settings import SettingsError

from gpufleet.domain.errors import ValidationError
from gpufleet.service.settings import Settings

# GPUFLEET_* variables that are not service settings: the build's and the tests' own
NOT_SETTINGS = frozenset({"NATIVE", "NATIVE_BUILD", "NATIVE_STRICT", "FORBID_SKIPS", "IMAGE_CACHE", "DATA", "CACHE"})


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """``GPUFLEET_*`` variables that name no setting (a misspelling such as ``GPUFLEET_DB_ULR`` would otherwise be
    ignored without a word, and the service would run on its default)."""
    known = {name.upper() for name in Settings.model_fields} | NOT_SETTINGS
    # the settings read the environment case-insensitively (gpufleet_port sets the port): so is the check
    return sorted(
        k for k in environ if k.upper().startswith("GPUFLEET_") and k.upper().removeprefix("GPUFLEET_") not in known
    )


def warn_unknown_variables() -> None:
    """Warn on stderr about each ``GPUFLEET_*`` variable of this process that names no setting (it changes nothing):
    every command that reads the settings or ``GPUFLEET_DB_URL`` (``serve``, ``db upgrade``, ``controller``)."""
    for name in unknown_variables(os.environ):
        print(f"warning: {name} is not a gpufleet setting; it is ignored (a misspelling?)", file=sys.stderr)


def load_settings(**overrides: Any) -> Settings:
    """Environment (``GPUFLEET_*``) first, then the options that were given on the command line. A ``GPUFLEET_*``
    variable that names no setting is warned about on stderr (it changes nothing)."""
    given = {k: v for k, v in overrides.items() if v is not None}
    warn_unknown_variables()
    try:
        return Settings(**given)
    except SettingsError as exc:  # a list or map setting whose environment variable is not JSON
        m = re.search(r'field "(\w+)"', str(exc))
        field = f"GPUFLEET_{m.group(1).upper()}" if m else "settings"
        raise ValidationError(field, "not valid JSON (a list or map setting: e.g. '[\"us-east-1\"]')") from None
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "settings"
        if field not in given and field != "settings":  # it came from the environment: say which variable
            field = f"GPUFLEET_{field.upper()}"
        raise ValidationError(field, str(err["msg"]).removeprefix("Value error, ")) from None
