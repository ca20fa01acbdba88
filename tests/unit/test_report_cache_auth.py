"""The report cache (testbed/report/cache/entries.py) unpickles or shows only what this user's process stored: a file
planted in ``.report-cache/`` (a pickle that would run code, a figure), a link or a FIFO is a miss, never
run, followed or waited on."""

from __future__ import annotations

import os
import pickle
import stat
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from testbed.report.cache import entries, signed


@pytest.fixture(autouse=True)
def own_key(tmp_path, monkeypatch):
    """A cache (and so a key) of the test's own."""
    monkeypatch.setenv("CC_TESTBED_CACHE", str(tmp_path / "user-cache"))
    monkeypatch.setenv("CC_TESTBED_KEYS", str(tmp_path / "user-cache"))


@pytest.fixture
def run(tmp_path) -> Path:
    """A run folder with its inputs and outputs, in a session folder."""
    folder = tmp_path / "session" / "cc=reno" / "seed=1"
    (folder / "raw").mkdir(parents=True)
    (folder / "manifest.json").write_text("{}")
    (folder / "raw" / "tcp_probe.txt").write_text("trace\n")
    for name in entries.OUTPUTS:
        (folder / name).write_text("")
    return folder


def _session(run: Path) -> Path:
    return run.parents[1]


def _store(run: Path, value: int = 7) -> Path:
    analysis = SimpleNamespace(report_path=run / "report.html", value=value)
    entries.store(_session(run), run, analysis, entries.inputs_key(run))
    return entries._entry_path(_session(run), run)


class _Payload:
    """A pickle that, loaded, makes a folder: what a planted entry could do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def test_an_entry_this_process_stored_is_a_hit(run):
    entry = _store(run)
    assert entries.load(_session(run), run).value == 7
    stored = entry.read_bytes()  # its tag, then the pickle
    assert stored[: signed.TAG_BYTES] == signed.sign(signed.user_key(), entry.name, stored[signed.TAG_BYTES :])


def test_the_key_is_made_private_and_kept(run, tmp_path):
    _store(run)
    key = tmp_path / "user-cache" / signed.KEY_FILE
    info = key.lstat()
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600 and info.st_size == signed.KEY_BYTES
    signed.KEYS.clear()  # another process: the same key read back, the entry still a hit
    assert entries.load(_session(run), run).value == 7


@pytest.mark.parametrize("planted", ["untagged", "zero tag", "another key"])
def test_a_planted_pickle_is_not_run_and_is_a_miss(run, tmp_path, planted):
    entry = _store(run)
    marker = tmp_path / "planted-code-ran"
    payload = pickle.dumps(_Payload(marker))
    tag = {"untagged": b"", "zero tag": b"\0" * 32, "another key": signed.sign(os.urandom(32), entry.name, payload)}
    entry.write_bytes(tag[planted] + payload)
    assert entries.load(_session(run), run) is None
    assert not marker.exists()


def test_an_entry_moved_under_another_name_is_a_miss(run, tmp_path):
    entry = _store(run)
    other = tmp_path / "session" / "cc=reno" / "seed=2"
    other.mkdir()
    for name in ("manifest.json", *entries.OUTPUTS):
        (other / name).write_text((run / name).read_text())
    entries._entry_path(_session(run), other).write_bytes(entry.read_bytes())
    assert entries.load(_session(run), other) is None


def test_a_linked_entry_is_a_miss(run, tmp_path):
    entry = _store(run)
    outside = tmp_path / "outside.pickle"
    entry.rename(outside)
    entry.symlink_to(outside)  # a valid entry, through a link: not followed
    assert entries.load(_session(run), run) is None


def test_a_fifo_entry_is_a_miss_at_once(run):
    entry = _store(run)
    entry.unlink()
    os.mkfifo(entry)
    result = []
    reader = threading.Thread(target=lambda: result.append(entries.load(_session(run), run)), daemon=True)
    reader.start()
    reader.join(timeout=5)
    assert not reader.is_alive() and result == [None]


def test_an_entry_larger_than_the_cap_is_not_read(run, monkeypatch):
    _store(run)
    monkeypatch.setattr(signed, "MAX_ENTRY_BYTES", 16)
    assert entries.load(_session(run), run) is None


def test_a_cache_folder_that_is_a_link_is_not_written_to(run, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (_session(run) / entries.CACHE_DIR).symlink_to(elsewhere)
    _store(run)  # skipped, not an error
    assert list(elsewhere.iterdir()) == [] and entries.load(_session(run), run) is None


def test_a_key_others_may_read_is_not_used(run, tmp_path):
    key = tmp_path / "user-cache" / signed.KEY_FILE
    key.parent.mkdir(parents=True)
    key.write_bytes(b"k" * signed.KEY_BYTES)
    key.chmod(0o644)
    _store(run)
    assert entries.load(_session(run), run) is None and not (_session(run) / entries.CACHE_DIR).exists()


def test_a_planted_figure_is_not_shown(tmp_path):
    session = tmp_path / "session"
    session.mkdir()
    assert entries.figure(session, lambda: b"ours", "bars", [1, 2]) == b"ours"
    assert entries.figure(session, lambda: b"drawn again", "bars", [1, 2]) == b"ours"  # stored: a hit
    (stored,) = (session / entries.CACHE_DIR).glob("figure-*.png")
    stored.write_bytes(b"\x89PNG planted")
    assert entries.figure(session, lambda: b"drawn again", "bars", [1, 2]) == b"drawn again"
