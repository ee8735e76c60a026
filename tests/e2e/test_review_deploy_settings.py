"""Review (deploy): the service's configuration from the environment, as a container platform hands it over. A
malformed ``GPUFLEET_*`` value must be one ``error:`` line naming the variable and exit 2, never a traceback, and never
echo the database password."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app as cli
from gpufleet.cli.service_settings import unknown_variables

runner = CliRunner()
PASSWORD = "S3cretPW"


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql+psycopg://bob:{PASSWORD}@127.0.0.1:notaport/db",  # a port that is not a number
        f"postgresql+psycopg://bob:{PASSWORD}@[::1/db",  # an IPv6 host without its closing bracket
    ],
)
@pytest.mark.parametrize("command", [["serve"], ["db", "upgrade"], ["token", "list"]])
def test_a_malformed_db_url_is_one_line_naming_the_variable(
    url: str, command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review (fixed), the defect: the settings checked only the URL's scheme; SQLAlchemy's parser then raised
    ``ValueError: invalid literal for int() with base 10: 'notaport'`` from ``make_engine``, which nothing caught: a
    traceback and exit 1 from ``serve``, ``db upgrade`` and ``token list`` (a CrashLoopBackOff whose log names
    neither the variable nor what is wrong with it). Now the settings parse the URL: one line naming the variable,
    exit 2."""
    monkeypatch.setenv("GPUFLEET_DB_URL", url)
    r = runner.invoke(cli, command)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 2, r.output
    assert "error: GPUFLEET_DB_URL" in r.output and "Traceback" not in r.output
    assert PASSWORD not in r.output


@pytest.mark.parametrize(
    "url", [f"postgres://bob:{PASSWORD}@127.0.0.1/db", f"postgresql+psycopg://bob:{PASSWORD}@127.0.0.1:notaport/db"]
)
def test_the_controller_checks_the_store_url_from_the_environment(
    url: str, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review (fixed), the defect: ``gpufleet controller --cluster C`` reads the store's URL from
    ``GPUFLEET_DB_URL`` (the API's Secret, overlays/store-linked) and handed it to ``make_engine`` unchecked, where
    ``serve`` and ``db upgrade`` check it: ``postgres://`` (Heroku's spelling, which the service names as
    unsupported) was ``NoSuchModuleError: Can't load plugin: sqlalchemy.dialects:postgres`` and a bad port a
    ``ValueError``, both tracebacks, exit 1. Expected: the service's own check, one line naming the variable, exit
    2, before any Kubernetes config is read."""
    monkeypatch.setenv("GPUFLEET_DB_URL", url)
    r = runner.invoke(cli, ["controller", "--kubeconfig", "/nonexistent/kubeconfig", "--cluster", "prod-1"])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 2, r.output
    assert "error: GPUFLEET_DB_URL" in r.output and "Traceback" not in r.output
    assert PASSWORD not in r.output


def test_a_lowercase_misspelt_variable_is_warned_about_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Review (fixed), the defect: the settings read ``GPUFLEET_*`` case-insensitively (``gpufleet_port=9000`` sets
    the port), but the check for misspelt names looked only at upper-case ones: ``gpufleet_db_ulr`` was ignored
    without a word and the service ran on its default SQLite file. Now the check is case-insensitive as the settings
    are."""
    env = {"gpufleet_db_ulr": "postgresql+psycopg://db/x", "gpufleet_port": "9000", "Gpufleet_Provider": "aws"}
    assert unknown_variables(env) == ["gpufleet_db_ulr"]
