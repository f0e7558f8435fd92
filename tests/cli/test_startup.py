"""What every `jobyard` command (and every worker process) pays before it does anything: the
imports of `jobyard.cli`. Two costs are kept off that path, checked by what a fresh interpreter
has loaded, not by timing it: httpx (the `http_request` handler imports it on first use) and the
argon2 hash that a login miss is verified against (made on first use). Together they were
~170 ms of a 0.57 s start (docs/TESTING.md, "What a command pays to start")."""

from __future__ import annotations

import json
import subprocess
import sys


def _after_importing_the_cli(expression: str) -> object:
    code = f"import json, sys, jobyard.cli; print(json.dumps({expression}))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(done.stdout)


def test_the_cli_does_not_import_httpx() -> None:
    assert _after_importing_the_cli("'httpx' in sys.modules") is False


def test_the_cli_does_not_hash_a_password_at_import() -> None:
    made = "sys.modules['jobyard.domain.passwords']._dummy_hash.cache_info().currsize"
    assert _after_importing_the_cli(made) == 0


def test_a_login_miss_still_verifies_against_a_hash() -> None:
    from jobyard.domain import passwords

    assert passwords.verify_password(None, "anything") is False
    assert passwords._dummy_hash.cache_info().currsize == 1
