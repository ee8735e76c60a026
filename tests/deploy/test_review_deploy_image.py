"""Review (deploy): what the runtime image carries besides gpufleet (built as tests/deploy/test_image.py builds it:
``scripts/image.sh build``, the cached mmdebstrap base and podman's layer cache)."""

from __future__ import annotations

from tests.deploy.test_image import _image_sh, image, pytestmark  # the module-scoped build fixture, its marks

__all__ = ["image", "pytestmark"]


def test_the_runtime_image_has_no_package_installer_or_build_backend(image: str) -> None:
    """Review (fixed), the defect: the Containerfile's runtime stage copies the build stage's whole venv, and with
    it pip (from ``python3 -m venv``) and setuptools and wheel (installed from the lock to build the package): a
    package installer and a build backend in the production image, which a process that gets code execution in the
    container can use to fetch and install anything, and ~15 MB nobody runs. Now the build stage uninstalls them
    after installing gpufleet: the venv holds gpufleet and its runtime dependencies only, and gpufleet still runs."""
    probe = (
        "import importlib.util as u, sys; "
        "left = [m for m in ('pip', 'setuptools', 'wheel') if u.find_spec(m)]; "
        "print(' '.join(left)); sys.exit(1 if left else 0)"
    )
    r = _image_sh("run", "--rm", "--read-only", "--entrypoint", "/opt/gpufleet/bin/python", image, "-c", probe)
    assert r.returncode == 0, f"left in the image: {r.stdout.strip()} {r.stderr[-500:]}"
    ls = _image_sh("run", "--rm", "--read-only", "--entrypoint", "/bin/ls", image, "/opt/gpufleet/bin")
    assert ls.returncode == 0, ls.stderr
    assert not {"pip", "pip3", "wheel"} & set(ls.stdout.split()), ls.stdout
    ok = _image_sh("run", "--rm", "--read-only", image, "--help")
    assert ok.returncode == 0 and "serve" in ok.stdout, ok.stdout + ok.stderr
