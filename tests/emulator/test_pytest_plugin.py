"""The pytest plugin as a user meets it: test files of their own, run by pytester."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from saltedtable.testing import EMULATOR_HOST_ENV, ENV_VAR, Emulator, list_tables

REPO = Path(__file__).resolve().parents[2]
INSTALL_HINT = "gcloud components install bigtable"

# Leaves a record of the tables its tests saw, for the last test to look for.
TABLE_LIFETIMES = """
import os

import pytest
from google.cloud.bigtable.data import SetCell

from saltedtable.testing import INSTANCE, list_tables

SEEN = []


def test_a_fresh_table_per_test(bigtable_table, bigtable_table_factory, bigtable_emulator):
    '''bigtable_table and each factory call are distinct tables that exist now.'''
    other = bigtable_table_factory(["x"])
    SEEN.extend([bigtable_table, other])
    assert bigtable_table != other
    assert {bigtable_table, other} <= set(list_tables(bigtable_emulator.address))
    assert os.environ["BIGTABLE_EMULATOR_HOST"] == bigtable_emulator.address


@pytest.mark.parametrize("bigtable_families", [("a", "b")])
@pytest.mark.asyncio
async def test_families_are_configurable(bigtable_table, bigtable_data_client):
    '''Overriding bigtable_families gives the table those families, and only those.'''
    async with bigtable_data_client.get_table(INSTANCE, bigtable_table) as table:
        await table.mutate_row(b"k", SetCell("b", b"q", b"v"))
        with pytest.raises(Exception, match="cf"):
            await table.mutate_row(b"k", SetCell("cf", b"q", b"v"))


def test_tables_are_deleted_after_their_test(bigtable_emulator):
    '''Every table an earlier test made is gone.'''
    assert len(SEEN) == 2
    assert not set(SEEN) & set(list_tables(bigtable_emulator.address))
"""


@pytest.fixture(autouse=True)
def user_config(pytester: pytest.Pytester) -> None:
    """The user's project sets pytest-asyncio's loop scope, as its docs ask."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_a_users_test_file_passes_with_an_emulator_of_its_own(
    pytester: pytest.Pytester, emulator: Emulator
) -> None:
    """examples/test_visits.py passes in a fresh project, on an emulator the plugin starts."""
    pytester.makepyfile(test_visits=(REPO / "examples" / "test_visits.py").read_text())
    pytester.makepyfile(test_lifetimes=TABLE_LIFETIMES)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=5)
    # The session's own emulator is untouched and the environment is restored.
    assert emulator.running
    assert os.environ[EMULATOR_HOST_ENV] == emulator.address


def test_a_missing_emulator_fails_with_the_install_hint(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No emulator: every test that needs one errors with the install hint; none is skipped."""
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "no-such-cbtemulator"))
    pytester.makepyfile(
        """
        def test_one(bigtable_table):
            '''Needs a table.'''

        def test_two(bigtable_emulator):
            '''Needs the emulator.'''

        def test_without():
            '''Needs nothing, runs anyway.'''
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(["*the Bigtable emulator is required*"])
    assert INSTALL_HINT in result.stdout.str()
    assert "skipped" not in result.stdout.str()


def test_an_emulator_host_given_on_the_command_line_is_used_and_left_running(
    pytester: pytest.Pytester, emulator: Emulator
) -> None:
    """--bigtable-emulator-host=ADDRESS uses that emulator and does not stop it."""
    pytester.makepyfile(
        f"""
        import os

        from saltedtable.testing import ExternalEmulator, list_tables

        def test_uses_it(bigtable_emulator, bigtable_table):
            '''The fixture is the given emulator; tables are made there.'''
            assert bigtable_emulator == ExternalEmulator("127.0.0.1", {emulator.port})
            assert os.environ["BIGTABLE_EMULATOR_HOST"] == "{emulator.address}"
            assert bigtable_table in list_tables("{emulator.address}")
        """
    )
    result = pytester.runpytest(
        "-p", "no:cacheprovider", f"--bigtable-emulator-host={emulator.address}"
    )
    result.assert_outcomes(passed=1)
    assert emulator.running
    list_tables(emulator.address)  # raises if it no longer serves


def test_an_emulator_host_where_nothing_answers_fails_clearly(pytester: pytest.Pytester) -> None:
    """A given address with no emulator behind it fails, naming the address; nothing starts."""
    address = f"127.0.0.1:{_free_port()}"
    pytester.makepyfile(
        """
        def test_needs_it(bigtable_emulator):
            '''Needs the emulator.'''
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", f"--bigtable-emulator-host={address}")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*no Bigtable emulator answers at {address}*"])


def test_without_pytest_asyncio_only_the_async_fixtures_fail(
    pytester: pytest.Pytester, emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With pytest-asyncio absent the plugin still loads; its async fixtures say what is missing."""
    # A pytest_asyncio that cannot be imported, ahead of the real one on the path.
    shadow = pytester.mkdir("shadow")
    (shadow / "pytest_asyncio.py").write_text("raise ImportError('hidden by the test')\n")
    pytester.makepyfile(
        """
        def test_sync_fixtures_work(bigtable_table):
            '''The sync fixtures need no pytest-asyncio.'''

        def test_async_fixture(bigtable_data_client):
            '''Needs pytest-asyncio.'''
        """
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(shadow), str(REPO)]))
    result = pytester.runpytest_subprocess(
        "-p", "no:asyncio", "-p", "no:cacheprovider", f"--bigtable-emulator-host={emulator.address}"
    )
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*bigtable_data_client is async and needs pytest-asyncio*"])


def test_the_sync_factory_runs_a_users_sync_tests_without_pytest_asyncio(
    pytester: pytest.Pytester, emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """examples/test_visits_sync.py passes through salted_table_factory and the sync client
    fixture with pytest-asyncio unimportable; the tables it made are deleted."""
    shadow = pytester.mkdir("shadow")
    (shadow / "pytest_asyncio.py").write_text("raise ImportError('hidden by the test')\n")
    pytester.makepyfile(test_visits_sync=(REPO / "examples" / "test_visits_sync.py").read_text())
    pytester.makepyfile(
        test_closed="""
        import pytest

        from saltedtable import SaltScheme
        from saltedtable.testing import list_tables

        MADE = []

        def test_makes_tables(salted_table_factory, bigtable_table):
            '''Two tables: a fresh one, and one over a given id; families= only for fresh ones.'''
            MADE.append(salted_table_factory(SaltScheme(4)))
            MADE.append(salted_table_factory(SaltScheme(4), table_id=bigtable_table))
            with pytest.raises(TypeError, match="families= only applies"):
                salted_table_factory(SaltScheme(4), table_id=bigtable_table, families=["x"])

        def test_they_were_deleted(bigtable_emulator):
            '''Both tables are gone after their test.'''
            assert not {t.table_id for t in MADE} & set(list_tables(bigtable_emulator.address))
        """
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(shadow), str(REPO)]))
    result = pytester.runpytest_subprocess(
        "-p", "no:asyncio", "-p", "no:cacheprovider", f"--bigtable-emulator-host={emulator.address}"
    )
    result.assert_outcomes(passed=4)
