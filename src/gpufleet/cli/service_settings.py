"""Building the service Settings from CLI options over the environment, with errors as one clear line."""

from __future__ import annotations

import re
from typing import Any

import pydantic
from pydantic_settings import SettingsError

from gpufleet.domain.errors import ValidationError
from gpufleet.service.settings import Settings


def load_settings(**overrides: Any) -> Settings:
    """Environment (``GPUFLEET_*``) first, then the options that were given on the command line."""
    given = {k: v for k, v in overrides.items() if v is not None}
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
