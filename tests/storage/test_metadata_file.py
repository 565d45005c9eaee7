"""The JSON files that hold what Kafka keeps in its metadata log (ACLs, SCRAM credentials, quotas,
dynamic configs)."""

from __future__ import annotations

import os
import stat

import pytest

from minibroker.storage.metadata_file import MetadataFileError, load_metadata, save_metadata


def test_saved_files_are_owner_only_and_read_back(tmp_path):
    save_metadata(str(tmp_path), "m.json", {"users": {"alice": 1}})
    os.chmod(tmp_path / "m.json", 0o644)  # an older file, readable by all: the next save replaces it
    save_metadata(str(tmp_path), "m.json", {"users": {"alice": 2}})
    assert stat.S_IMODE(os.stat(tmp_path / "m.json").st_mode) == 0o600
    assert load_metadata(str(tmp_path), "m.json", None) == {"users": {"alice": 2}}
    assert not (tmp_path / "m.json.tmp").exists()


def test_missing_is_the_default_and_damaged_is_an_error(tmp_path):
    assert load_metadata(str(tmp_path), "absent.json", {"x": 0}) == {"x": 0}
    (tmp_path / "bad.json").write_text('{"acls": [')
    with pytest.raises(MetadataFileError, match="bad.json"):
        load_metadata(str(tmp_path), "bad.json", {})


def test_a_temp_file_left_by_a_crash_does_not_keep_its_mode(tmp_path):
    """A crash between the temp file's creation and its rename leaves ``m.json.tmp``; O_CREAT would
    keep its mode, so the next save replaces it and the secrets stay owner-only."""
    (tmp_path / "m.json.tmp").write_text("half")
    os.chmod(tmp_path / "m.json.tmp", 0o644)
    save_metadata(str(tmp_path), "m.json", {"users": {}})
    assert stat.S_IMODE(os.stat(tmp_path / "m.json").st_mode) == 0o600
    assert load_metadata(str(tmp_path), "m.json", None) == {"users": {}}
