"""The root secret the API signs with: `JOBYARD_SECRET_KEY`, or one generated on first start.

No secret lives in the source. With no key configured (dev and test only: settings refuse to
start `prod` without one), the API reads `<data dir>/secret_key`, creating it on first start
from 256 random bits with mode 0600. Every API process sharing that data directory (`jobyard
up`, `jobyard demo`) signs with the same key; replicas on other machines need an explicit key.
A key file that others may read is refused rather than trusted.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path
from typing import Final

from jobyard.db import locate
from jobyard.domain.errors import ConfigurationError
from jobyard.domain.settings import Settings
from jobyard.logs import get_logger

log = get_logger("jobyard.api")

KEY_FILE: Final = "secret_key"
MIN_LENGTH: Final = 32


def key_path(settings: Settings) -> Path:
    return locate.data_dir(settings) / KEY_FILE


def resolve_secret_key(settings: Settings) -> str:
    """The configured key, else the data directory's generated one (logged once, as a warning)."""
    if settings.secret_key is not None:
        return settings.secret_key.get_secret_value()
    path = key_path(settings)
    key = _load_or_create(path)
    log.warning(
        "using a generated secret key; set JOBYARD_SECRET_KEY to choose one "
        "(required with JOBYARD_ENV=prod and for API replicas on several machines)",
        key_file=str(path),
    )
    return key


def _load_or_create(path: Path) -> str:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="ascii") as f:
                f.write(secrets.token_urlsafe(32) + "\n")
            # link() fails if the file appeared meanwhile: the first process to start wins and
            # every other one reads its key.
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise ConfigurationError(
            f"{path} may be read by other users (mode {mode:04o}); run `chmod 600 {path}`"
        )
    key = path.read_text(encoding="ascii").strip()
    if len(key) < MIN_LENGTH:
        raise ConfigurationError(
            f"{path} holds a key shorter than {MIN_LENGTH} characters; delete it to generate one"
        )
    return key
