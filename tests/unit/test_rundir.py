"""Results layout, atomic writes, hashes and run status."""

import json

from testbed.results import rundir
from testbed.results.manifest import run_status


def test_layout(tmp_path):
    session = rundir.session_dir(tmp_path, "default", "0123456789abcdef")
    assert session.parent == tmp_path / "default"
    assert session.name.endswith("-0123456")
    assert rundir.run_dir(session, "cc=reno", 3) == session / "cc=reno" / "seed=3"


def test_atomic_write_leaves_no_temporary(tmp_path):
    path = tmp_path / "a" / "manifest.json"
    rundir.write_json_atomic(path, {"status": "running"})
    rundir.write_json_atomic(path, {"status": "complete"})
    assert json.loads(path.read_text()) == {"status": "complete"}
    assert sorted(p.name for p in path.parent.iterdir()) == ["manifest.json"]


def test_status_of_a_run(tmp_path):
    assert run_status(tmp_path) == "missing"
    rundir.write_json_atomic(tmp_path / "manifest.json", {"status": "running"})
    assert run_status(tmp_path) == "incomplete"  # its process is gone
    rundir.write_json_atomic(tmp_path / "manifest.json", {"status": "failed", "reason": "x"})
    assert run_status(tmp_path) == "failed"
    (tmp_path / "manifest.json").write_text("{cut")
    assert run_status(tmp_path) == "incomplete"


def test_file_hashes_cover_raw_files_but_not_the_manifest(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "x.txt").write_text("abc")
    (tmp_path / "manifest.json").write_text("{}")
    hashes = rundir.file_hashes(tmp_path)
    assert hashes == {"raw/x.txt": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}
