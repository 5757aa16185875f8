"""The tables' client_internals switch and SALTEDTABLE_CLIENT_INTERNALS, over the fake table.

Which read path a client's table takes is tested in ``test_chunks.py`` and on the
emulator (``tests/emulator/test_client_internals_emulator.py``); here: how the
switch is resolved, and the private parts it keeps saltedtable from touching.
"""

from __future__ import annotations

from typing import Any

import pytest

from saltedtable import CallStats, SaltedTable, SaltedTableAsync, SaltScheme
from saltedtable._admin import schema_reader_for
from saltedtable._facade import CLIENT_INTERNALS_ENV, use_client_internals
from tests.fakes import FakeTable, SyncFakeTable

SCHEME = SaltScheme(4)


@pytest.mark.parametrize(
    ("explicit", "env", "expected"),
    [
        (None, None, True),
        (None, "", True),
        (None, "off", False),
        (None, " OFF ", False),
        (None, "0", False),
        (None, "false", False),
        (None, "on", True),
        (None, "1", True),
        (True, "off", True),  # the argument wins
        (False, "on", False),
        (False, None, False),
    ],
)
def test_the_argument_wins_over_the_environment_variable(
    monkeypatch: pytest.MonkeyPatch, explicit: bool | None, env: str | None, expected: bool
) -> None:
    if env is None:
        monkeypatch.delenv(CLIENT_INTERNALS_ENV, raising=False)
    else:
        monkeypatch.setenv(CLIENT_INTERNALS_ENV, env)
    assert use_client_internals(explicit) is expected
    assert SaltedTableAsync(FakeTable(), SCHEME, client_internals=explicit).client_internals is (
        expected
    )
    sync = SaltedTable(SyncFakeTable(FakeTable()), SCHEME, client_internals=explicit)
    assert sync.client_internals is expected


def test_a_bad_environment_value_is_an_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(CLIENT_INTERNALS_ENV, "disabled")
    with pytest.raises(ValueError, match=r"SALTEDTABLE_CLIENT_INTERNALS='disabled'"):
        SaltedTableAsync(FakeTable(), SCHEME)
    with pytest.raises(ValueError, match="SALTEDTABLE_CLIENT_INTERNALS"):
        SaltedTable(SyncFakeTable(FakeTable()), SCHEME)
    # An explicit argument does not read it.
    assert SaltedTableAsync(FakeTable(), SCHEME, client_internals=False).client_internals is False
    with pytest.raises(TypeError, match="client_internals"):
        SaltedTableAsync(FakeTable(), SCHEME, client_internals="off")  # type: ignore[arg-type]


class _Client:
    """A data client's attributes, private ones included, counting reads of the private ones."""

    project = "p"

    def __init__(self) -> None:
        self.private_reads: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.private_reads.append(name)
        raise AttributeError(name)


class _ClientTable(FakeTable):
    """A fake table that names its client, project, instance and table as the client's do."""

    instance_id = "i"
    table_id = "t"
    saltedtable_schema = None  # (the guard reads the schema through the admin API)

    def __init__(self) -> None:
        super().__init__()
        self.client = _Client()


async def test_switched_off_no_private_attribute_of_the_client_is_read() -> None:
    """Neither the retry counter (the client's metrics controller) nor the guard's schema
    reader (the client's credentials and emulator) looks at the client's private parts."""
    table = _ClientTable()
    salted = SaltedTableAsync(table, SCHEME, guard=False, client_internals=False)
    await salted.read_rows({}, stats=CallStats())
    assert schema_reader_for(table, internals=False) is not None
    assert table.client.private_reads == []
    on = SaltedTableAsync(_ClientTable(), SCHEME, guard=False)
    await on.read_rows({}, stats=CallStats())
    assert "_metrics" in on.table.client.private_reads  # type: ignore[attr-defined]
    schema_reader_for(table)
    assert {"_credentials", "_emulator_host"} <= set(table.client.private_reads)
