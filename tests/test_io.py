"""Atomic writes (edgeosc/io.py): all or nothing, and readable like any file the user makes."""
import os

import pytest

from edgeosc.io import atomic_path, write_json


def test_atomic_writes_are_all_or_nothing_and_keep_a_files_mode(tmp_path):
    path = tmp_path / "sub" / "a.json"
    write_json(path, {"x": 1})
    assert path.read_text().strip().startswith("{") and path.stat().st_mode & 0o777 == 0o644  # not mkstemp's 0600
    os.chmod(path, 0o640)
    write_json(path, {"x": 2})
    assert path.stat().st_mode & 0o777 == 0o640 and '"x": 2' in path.read_text()
    with pytest.raises(RuntimeError):
        with atomic_path(path) as tmp:
            tmp.write_text("half")
            raise RuntimeError("interrupted")
    assert '"x": 2' in path.read_text() and [p.name for p in path.parent.iterdir()] == ["a.json"]
