"""Shared by the hostile-input tests: run the ``distsim`` CLI in-process on bad input."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from distsim_gpu.scenarios.cli.main import main

QUICKSTART = str(Path(__file__).parents[2] / "scenarios" / "examples" / "quickstart.yaml")


def _rejects(capsys: pytest.CaptureFixture[str]) -> Callable[..., str]:
    def run(*argv: str, names: str | None = None) -> str:
        """Run ``distsim argv``; assert a clean error (status 2, one ``distsim: error:``
        line naming ``names`` when given); return the error text."""
        status = main(list(argv))
        err = capsys.readouterr().err
        assert status == 2, err
        assert "Traceback" not in err
        assert err.startswith("distsim: error: "), err
        if names is not None:
            assert names in err, err
        return err
    return run


@pytest.fixture
def rejects(capsys: pytest.CaptureFixture[str]) -> Callable[..., str]:
    """``rejects(*argv, names=None)``: the CLI exits 2 with a clear error naming ``names``."""
    return _rejects(capsys)
