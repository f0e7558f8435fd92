"""jobyard as a user installs it: the wheel built from this checkout in a fresh virtualenv
outside the repository, dependencies from the locked set through uv's cache (about a second,
offline once `make install` has filled the cache). Shared by the acceptance and docs tests."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
UV = REPO / ".tools" / "bin" / "uv"


def run(args: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, (
        f"{args} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    )
    return result.stdout + result.stderr


def build(out: Path) -> None:
    """`uv build`: the sdist, then the wheel built from it (what PyPI would get)."""
    run([str(UV), "build", "--out-dir", str(out), "-q"], cwd=REPO)


def user_dir(prefix: str) -> Path:
    """A directory outside the repository that the embedded server's own user can read (it
    runs as another user when we are root; pytest's tmp_path is 0700)."""
    root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    root.chmod(0o755)
    return root


def install(wheel: Path, venv: Path) -> None:
    reqs = venv.parent / "requirements.lock.txt"
    run(
        [str(UV), "export", "--frozen", "--no-dev", "--no-emit-project", "--no-hashes",
         "-q", "-o", str(reqs)],
        cwd=REPO,
    )  # fmt: skip
    run([str(UV), "venv", "-q", str(venv), "--python", sys.executable], cwd=venv.parent)
    pip_install(venv, ["-r", str(reqs), str(wheel)])


def pip_install(venv: Path, args: list[str]) -> None:
    """`uv pip install` into `venv`: from the cache alone when it can, else the index."""
    command = [str(UV), "pip", "install", "-q", "--python", str(venv / "bin" / "python"), *args]
    if subprocess.run([*command, "--offline"], capture_output=True).returncode:
        run(command, cwd=venv.parent)


def user_env(venv: Path) -> dict[str, str]:
    """A user's shell: the venv first on PATH, no repository on sys.path, none of the test
    suite's jobyard settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBYARD_", "PYTHON"))}
    env.pop("DATABASE_URL", None)
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    env["JOBYARD_LOG_FORMAT"] = "console"
    env["COLUMNS"] = "200"
    return env


def stop_embedded(venv: Path, cwd: Path) -> None:
    if (venv / "bin" / "jobyard").exists() and cwd.is_dir():
        subprocess.run(
            [str(venv / "bin" / "jobyard"), "db", "stop"],
            cwd=cwd,
            env=user_env(venv),
            capture_output=True,
            timeout=120,
        )
    # The page's test (jobyard.testing) starts its own embedded server in .jobyard/test-pgdata.
    if (cwd / ".jobyard" / "test-pgdata").is_dir():
        subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-c",
                _STOP_TEST_SERVER,
                str(cwd / ".jobyard" / "test-pgdata"),
            ],
            cwd=cwd,
            env=user_env(venv),
            capture_output=True,
            timeout=120,
        )


_STOP_TEST_SERVER = (
    "import sys, pathlib; from jobyard.db import embedded; embedded.stop(pathlib.Path(sys.argv[1]))"
)
