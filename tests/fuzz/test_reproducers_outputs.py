"""Outputs never touch what they should not (issue 27's D24, D39, D52, D53), through the
``distsim`` command: a device, a FIFO, a symbolic link or a directory named as an output
file is refused by name and left as it was; ``--out`` given as a symbolic link is refused
without leaving anything behind; written files get the mode ``open()`` would give them."""

from __future__ import annotations

import os
import stat

import pytest
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.fileio import atomic_write_text

from tests.conftest import REPO_ROOT

DUMP = REPO_ROOT / "tests" / "topology" / "dumps" / "dgx-h100.topo.xml"


def _import(capsys, output: str) -> tuple[int, str]:
    status = main(["topology", "import", str(DUMP), "-o", output])
    err = capsys.readouterr().err
    return status, err


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("distsim: error:"), err
    assert "Traceback" not in err
    return lines[0]


def test_dev_null_stays_a_device(capsys):
    before = os.stat("/dev/null")
    status, err = _import(capsys, "/dev/null")
    assert status == 2
    assert "/dev/null" in _one_error_line(err) and "device, pipe or socket" in err
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_a_non_regular_output_path_is_refused_and_left_alone(tmp_path, capsys, kind):
    target = tmp_path / "out.yaml"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "symlink":
        target.symlink_to(victim)
    else:
        target.mkdir()
    status, err = _import(capsys, str(target))
    assert status == 2
    line = _one_error_line(err)
    assert str(target) in line
    assert {"fifo": "device, pipe or socket", "symlink": "symbolic link",
            "directory": "a directory"}[kind] in line
    assert victim.read_text() == "keep me"
    assert (target.is_symlink() if kind == "symlink" else target.exists())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.yaml", "victim.txt"]


def test_the_current_directory_and_an_overlong_name_are_refused(tmp_path, capsys,
                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, err = _import(capsys, ".")
    assert status == 2 and "a directory" in _one_error_line(err)
    status, err = _import(capsys, "x" * 300 + ".yaml")
    assert status == 2 and "too long" in _one_error_line(err)
    assert list(tmp_path.iterdir()) == []


def test_written_files_have_the_mode_open_would_give(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "new.txt", "x")
        assert stat.S_IMODE(os.stat(tmp_path / "new.txt").st_mode) == 0o644
        kept = tmp_path / "kept.txt"
        kept.write_text("old")
        kept.chmod(0o600)
        atomic_write_text(kept, "new")
        assert stat.S_IMODE(os.stat(kept).st_mode) == 0o600
    finally:
        os.umask(old)
    with pytest.raises(ConfigError, match="not a regular file"):
        atomic_write_text(tmp_path, "x")


def test_out_given_as_a_symlink_is_refused_and_nothing_is_left_behind(tmp_path, capsys):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    status = main(["run", str(REPO_ROOT / "scenarios" / "examples" / "quickstart.yaml"),
                   "--out", str(link)])
    err = capsys.readouterr().err
    assert status == 2
    line = _one_error_line(err)
    assert "--out" in line and "symbolic link" in line
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]
    assert list(real.iterdir()) == []


@pytest.mark.parametrize("name", ["a\nb: evil.xml", "a\u2028b.xml", "tab\there.xml"])
def test_an_imported_files_name_cannot_break_the_yaml_it_writes(tmp_path, capsys, name):
    """D41: the input's file name goes into the emitted file's header comment escaped."""
    dump = tmp_path / name
    dump.write_bytes(DUMP.read_bytes())
    out = tmp_path / "cluster.yaml"
    assert main(["topology", "import", str(dump), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["topology", "show", str(out)]) == 0
    header = out.read_text().splitlines()[0]
    assert header.startswith("# Cluster imported") and "\\" in header


@pytest.mark.parametrize("model_name", ["../..", "/tmp/evil", "a/../../b", "..."])
def test_chakra_export_writes_only_inside_its_directory(tmp_path, capsys, model_name):
    """D40: the ET file names come from model.name; none may leave ``--out DIR``."""
    out = tmp_path / "sub" / "ets"
    status = main(["trace", "export-chakra",
                   str(REPO_ROOT / "scenarios" / "examples" / "quickstart.yaml"),
                   "--out", str(out), "--set", f"model.name={model_name}"])
    capsys.readouterr()
    assert status == 0
    written = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert written and all(p.parent == out for p in written)
    assert all(p.name.endswith(".et") and not p.name.startswith(".") for p in written)


_XML = (REPO_ROOT / "tests" / "topology" / "dumps" / "dgx-h100.topo.xml").read_text()


def _xml_error(tmp_path, capsys, text: str) -> str:
    dump = tmp_path / "topo.xml"
    dump.write_text(text)
    status = main(["topology", "import", str(dump), "-o", str(tmp_path / "c.yaml")])
    err = capsys.readouterr().err
    assert status == 2 and not (tmp_path / "c.yaml").exists()
    return _one_error_line(err)


def test_an_xml_nested_thousands_deep_is_refused_not_a_recursion_error(tmp_path, capsys):
    """D18."""
    deep = "<system>" + "<pci>" * 3000 + "</pci>" * 3000 + "</system>"
    assert "nested more than 64 deep" in _xml_error(tmp_path, capsys, deep)


@pytest.mark.parametrize(("old", "new", "words"), [
    (' sm="90"', ' sm="90.5"', "sm='90.5'> must be a whole number > 0"),
    (' sm="90"', ' sm="nan"', "must be a whole number > 0"),
    (' sm="90"', ' sm="-90"', "must be a whole number > 0"),
    (' sm="90"', ' sm="0"', "must be a whole number > 0"),
    (' dev="0"', ' dev="inf"', "dev='inf'> must be a whole number >= 0"),
    (' dev="0"', ' dev="' + "9" * 5000 + '"', "must be a whole number >= 0"),
    ('tclass="0x068000"', 'tclass="zz"', "must be a hexadecimal number"),
    (' count="4"', ' count="0"', "must be a whole number > 0"),
    (' count="4"', ' count="4.5"', "must be a whole number > 0"),
])
def test_xml_numbers_that_are_not_what_they_must_be_are_named(tmp_path, capsys, old, new,
                                                              words):
    """D19, D46: fractional, infinite, NaN, negative, zero, 5,000-digit or non-hex
    attributes are errors naming the element and attribute, never dropped or defaulted."""
    assert old in _XML
    assert words in _xml_error(tmp_path, capsys, _XML.replace(old, new, 1))


_IB = (REPO_ROOT / "tests" / "topology" / "dumps" / "two-dgx-a100.ibnetdiscover").read_text()


def _ib_import(tmp_path, capsys, text: str) -> tuple[int, str]:
    dump = tmp_path / "fabric.ibnetdiscover"
    dump.write_text(text)
    status = main(["topology", "import", str(dump), "-o", str(tmp_path / "ib.yaml"),
                   "--node", "dgx-a100"])
    return status, capsys.readouterr().err


@pytest.mark.parametrize("description", ["dgx01 mlx5_²", "dgx01 mlx5_\u0661"])
def test_hca_descriptions_with_other_digits_import(tmp_path, capsys, description):
    """D21: an HCA whose name has digits that are not ASCII sorts, and imports."""
    text = _IB.replace('# "dgx01 mlx5_0"\n', f'# "{description}"\n', 1)
    status, err = _ib_import(tmp_path, capsys, text)
    assert status == 0, err


def test_a_blank_hca_description_is_its_own_host_not_a_crash(tmp_path, capsys):
    """D20: no host name to group it by, so the HCA stands alone; dgx01 then has 7 HCAs
    for 8 NICs and the cluster cannot be built — said in one line, no traceback."""
    text = _IB.replace('# "dgx01 mlx5_0"\n', '# "   "\n', 1)
    status, err = _ib_import(tmp_path, capsys, text)
    assert status == 2 and "cannot reach" in _one_error_line(err)


def test_a_router_with_cables_is_forwarded_through_like_a_switch(tmp_path, capsys):
    """D22."""
    text = _IB.replace("Switch\t40", "Rt\t40", 1)
    status, err = _ib_import(tmp_path, capsys, text)
    assert status == 0, err
    written = (tmp_path / "ib.yaml").read_text()
    assert "sw0" in written


@pytest.mark.parametrize(("old", "new", "words"), [
    ("[1]\t", "[" + "1" * 4400 + "]\t", "cannot read"),
    ("lid 11 4xHDR", "lid 11 " + "4" * 4400 + "xHDR", "no link width and speed"),
    ('"H-0c42a10300c80000"[1](c42a10300c80000) \t\t# "dgx01 mlx5_0" lid 11 4xHDR',
     '"H-0c42a10300c80000"[1](c42a10300c80000) \t\t# "dgx01 mlx5_0" lid 11 2xHDR',
     "disagree on its speed"),
])
def test_bad_ibnetdiscover_cells_are_named(tmp_path, capsys, old, new, words):
    """D23 (4,400-digit numbers), D47 (cable ends that disagree on speed)."""
    assert old in _IB
    status, err = _ib_import(tmp_path, capsys, _IB.replace(old, new, 1))
    assert status == 2 and words in _one_error_line(err)


def _matrix(names: list[str], cell: str = "NV1") -> str:
    """GPUs joined by ``cell``, and one NIC beside the first GPU (SYS to the others)."""
    every = [*names, "NIC0"]

    def relation(a: str, b: str) -> str:
        if a == b:
            return "X"
        if "NIC0" in (a, b):
            return "PIX" if names[0] in (a, b) else "SYS"
        return cell

    return ("\t" + "\t".join(every) + "\tCPU Affinity\n" + "".join(
        f"{a}\t" + "\t".join(relation(a, b) for b in every) + "\n" for a in every))


def _smi_import(tmp_path, capsys, text: str) -> tuple[int, str]:
    dump = tmp_path / "topo.txt"
    dump.write_text(text)
    status = main(["topology", "import", str(dump), "-o", str(tmp_path / "c.yaml")])
    return status, capsys.readouterr().err


@pytest.mark.parametrize(("names", "cell", "words"), [
    (["GPU0", "GPU1", "GPUx"], "NV1", "header cell 'GPUx' is not a GPU name"),
    (["GPU0", "GPU1"], "NV" + "9" * 4400, "unknown connection"),
])
def test_bad_topo_matrix_headers_and_cells_are_named(tmp_path, capsys, names, cell, words):
    """D48 (a GPU-like header taken as a NIC), D23 (a 4,400-digit NV# cell)."""
    status, err = _smi_import(tmp_path, capsys, _matrix(names, cell))
    assert status == 2 and words in _one_error_line(err)


def test_a_1200_gpu_matrix_imports(tmp_path, capsys):
    """D38: one pass over the NVLink pairs (the per-GPU sums were cubic: 81 s at 1,200
    GPUs; benchmarks/README.md has the figures)."""
    status, err = _smi_import(tmp_path, capsys, _matrix([f"GPU{i}" for i in range(1200)]))
    assert status == 0, err
