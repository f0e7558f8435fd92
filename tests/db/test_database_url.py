"""What the database URL may be: libpq's forms, checked before a connection is tried."""

from __future__ import annotations

import pytest

from jobyard.db import diagnose
from jobyard.domain.errors import ConfigurationError
from tests.cli.test_database_errors import _closed_port, needs_pg15


@needs_pg15
def test_several_hosts_are_tried_in_turn() -> None:
    """Found by a user check (2026-12-05): a libpq multi-host URL was refused as an invalid
    port '5432,5433'. The first host here refuses connections; libpq goes on to the second."""
    url = f"postgresql://postgres@127.0.0.1:{_closed_port()},127.0.0.1:5432/test"
    where = diagnose.target(url)
    assert where.host == "127.0.0.1,127.0.0.1" and where.port.endswith(",5432")
    diagnose.probe(url)


def test_each_port_of_several_hosts_is_checked() -> None:
    with pytest.raises(ConfigurationError, match="invalid port '99999'"):
        diagnose.target("postgresql://postgres@h1:5432,h2:99999/test")


def test_an_unknown_parameter_is_named() -> None:
    """It was "not a PostgreSQL URL", which sent the user looking at the wrong part."""
    with pytest.raises(ConfigurationError, match='invalid URI query parameter: "foo"'):
        diagnose.target("postgresql://postgres@127.0.0.1:5432/test?foo=bar")
