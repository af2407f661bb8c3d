"""`xladev run` / `python -m xladev.run` as a command: the script runs as `python script.py` would run it.

These scripts do not import torch, so each run costs a Python start-up, not the runtime's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from xladev.cli.run import ALIAS_DIR

ALIAS_INIT = os.path.join(ALIAS_DIR, "torch_xla", "__init__.py")

PROBE = """\
import importlib.util, json, os, sys
print(json.dumps({"argv": sys.argv, "name": __name__, "file": __file__, "path0": sys.path[0],
                  "torch_xla": importlib.util.find_spec("torch_xla").origin,
                  "pythonpath": os.environ.get("PYTHONPATH", "")}))
"""


def _launcher(kind: str) -> list[str]:
    if kind == "module":
        return [sys.executable, "-m", "xladev.run"]
    launcher = Path(sys.executable).parent / "xladev"
    return [str(launcher), "run"] if launcher.exists() else [sys.executable, "-m", "xladev.cli.main", "run"]


def _run(kind: str, *args: str, cwd: Path, pythonpath: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run([*_launcher(kind), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def probe(tmp_path) -> Path:
    path = tmp_path / "probe.py"
    path.write_text(PROBE)
    return path


@pytest.mark.parametrize("kind", ["command", "module"])
def test_the_script_runs_as_main_with_its_arguments_and_the_alias(tmp_path, probe, kind):
    # Arguments after the script are the script's, options included (even -h and the runner's own option).
    result = _run(kind, "probe.py", "--lr", "0.1", "-h", "--shadow-torch-xla", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["argv"] == ["probe.py", "--lr", "0.1", "-h", "--shadow-torch-xla"]
    assert seen["name"] == "__main__" and seen["file"] == str(probe) and seen["path0"] == str(tmp_path)
    assert seen["torch_xla"] == ALIAS_INIT
    assert seen["pythonpath"].split(os.pathsep)[0] == ALIAS_DIR  # for the processes the script starts
    assert result.stderr == ""


def test_sys_exit_status_is_kept(tmp_path):
    (tmp_path / "leave.py").write_text("import sys\nprint('bye')\nsys.exit(3)\n")
    result = _run("command", "leave.py", cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (3, "bye\n", "")


@pytest.mark.parametrize("kind", ["command", "module"])
def test_an_exception_prints_the_scripts_traceback_and_exits_1(tmp_path, kind):
    script = tmp_path / "broken.py"
    script.write_text("def step():\n    raise ValueError('bad batch')\n\nstep()\n")
    result = _run(kind, "broken.py", cwd=tmp_path)
    direct = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr == direct.stderr  # the same traceback as `python script.py`: none of the runner's frames
    assert result.stderr.startswith("Traceback (most recent call last):\n") and "ValueError: bad batch" in result.stderr


def test_a_syntax_error_reads_as_pythons(tmp_path):
    script = tmp_path / "typo.py"
    script.write_text("x = (\n")
    result = _run("command", "typo.py", cwd=tmp_path)
    direct = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and result.stderr == direct.stderr


@pytest.mark.parametrize("kind,args,expected", [
    ("command", (), "give the training script to run"),
    ("module", (), "give the training script to run"),
    ("command", ("missing.py",), "no such script: missing.py"),
    ("module", ("missing.py",), "no such script: missing.py"),
    ("command", (".",), ". is a directory"),
    ("module", ("--bogus", "x.py"), "unrecognized arguments: --bogus"),
])
def test_bad_usage_is_one_line_and_status_2(tmp_path, kind, args, expected):
    result = _run(kind, *args, cwd=tmp_path)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and expected in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_real_torch_xla_is_never_shadowed_silently(tmp_path, probe):
    installed = tmp_path / "site" / "torch_xla"
    installed.mkdir(parents=True)
    (installed / "__init__.py").write_text("raise SystemExit('the real torch_xla was imported')\n")

    refused = _run("command", "probe.py", cwd=tmp_path, pythonpath=str(tmp_path / "site"))
    assert refused.returncode == 2 and refused.stdout == ""
    assert len(refused.stderr.splitlines()) == 1, refused.stderr
    assert str(installed) in refused.stderr and "--shadow-torch-xla" in refused.stderr

    forced = _run("command", "--shadow-torch-xla", "probe.py", "a", cwd=tmp_path, pythonpath=str(tmp_path / "site"))
    assert forced.returncode == 0, forced.stderr
    assert len(forced.stderr.splitlines()) == 1 and "shadowing" in forced.stderr and str(installed) in forced.stderr
    seen = json.loads(forced.stdout)
    assert seen["torch_xla"] == ALIAS_INIT and seen["argv"] == ["probe.py", "a"]
    assert seen["pythonpath"].split(os.pathsep)[:2] == [ALIAS_DIR, str(tmp_path / "site")]


def test_a_torch_xla_beside_the_script_is_refused_then_shadowed(tmp_path, probe):
    (tmp_path / "torch_xla").mkdir()
    (tmp_path / "torch_xla" / "__init__.py").write_text("")
    assert _run("command", "probe.py", cwd=tmp_path).returncode == 2
    forced = _run("command", "--shadow-torch-xla", "probe.py", cwd=tmp_path)
    assert forced.returncode == 0 and json.loads(forced.stdout)["torch_xla"] == ALIAS_INIT


def test_a_nested_run_does_not_take_the_alias_for_a_real_torch_xla(tmp_path, probe):
    # A script started by `xladev run` inherits the alias on PYTHONPATH; running `xladev run` again is fine.
    result = _run("command", "probe.py", cwd=tmp_path, pythonpath=ALIAS_DIR)
    assert result.returncode == 0 and result.stderr == ""
