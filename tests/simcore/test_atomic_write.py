"""Output files appear whole or not at all."""

from __future__ import annotations

import os

import pytest
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.fileio import atomic_write_bytes, atomic_write_text


def test_write_creates_file_and_parents_and_leaves_no_temp(tmp_path):
    target = tmp_path / "out" / "run1" / "trace.json"
    atomic_write_text(target, '{"traceEvents": []}')
    assert target.read_text() == '{"traceEvents": []}'
    assert os.listdir(target.parent) == ["trace.json"]


def test_rewrite_replaces_content_whole(tmp_path):
    target = tmp_path / "report.txt"
    atomic_write_text(target, "a much longer first version\n" * 100)
    atomic_write_text(target, "short")
    assert target.read_text() == "short"
    assert os.listdir(tmp_path) == ["report.txt"]


def test_bytes_are_written_exactly(tmp_path):
    data = bytes(range(256)) * 3
    atomic_write_bytes(tmp_path / "blob.bin", data)
    assert (tmp_path / "blob.bin").read_bytes() == data


def test_text_is_utf8(tmp_path):
    atomic_write_text(tmp_path / "u.txt", "2 µs — ok")
    assert (tmp_path / "u.txt").read_bytes() == "2 µs — ok".encode()


def test_failed_rename_keeps_old_file_and_removes_temp(tmp_path, monkeypatch):
    target = tmp_path / "summary.json"
    target.write_text("old")

    def boom(src, dst):
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(ConfigError, match="cannot write output file: disk on fire"):
        atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["summary.json"]


def test_failure_while_writing_keeps_old_file_and_removes_temp(tmp_path, monkeypatch):
    target = tmp_path / "summary.json"
    target.write_text("old")

    def boom(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_bytes(target, b"new")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["summary.json"]


@pytest.mark.parametrize("below", ["x.yaml", "sub/x.yaml"])
def test_an_output_below_a_file_names_the_file(tmp_path, below):
    """``-o FILE/x.yaml`` (calibrate, trace chakra, validate trace --out) names the file in
    the way; it had said only "Not a directory"."""
    a_file = tmp_path / "file"
    a_file.write_text("kept")
    with pytest.raises(ConfigError, match=f"{a_file} is a file, not a directory"):
        atomic_write_text(a_file / below, "new")
    assert a_file.read_text() == "kept"
