"""`xladev doctor` on this machine, and on a path with a stray legacy plugin or a second xprof."""

from __future__ import annotations

import json

import pytest

from xladev.cli import doctor
from xladev.cli.main import main as cli_main


def install_fake_distribution(site, name: str, version: str, entry_points: str = "") -> None:
    """A real (metadata-only) installed distribution in directory `site`, as pip would leave it."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if entry_points:
        (info / "entry_points.txt").write_text(entry_points)


def test_doctor_is_healthy_here(capfd):
    rc = cli_main(["doctor"])
    out, err = capfd.readouterr()  # the file descriptors: what native code prints is caught too
    assert rc == 0, out
    assert "healthy" in out
    for needle in ("tensorboard installed: tensorboard ", "xprof installed: xprof ", "protobuf installed: protobuf ",
                   "in-process capture", "HLO module(s) for the graph viewer", "capture through a profiler server"):
        assert needle in out
    assert "FAIL" not in out
    # Nothing but the report: no "Starting to trace ..." from the capture client, no native log lines.
    lines = out.splitlines()
    assert lines[0].startswith("xladev doctor:") and lines[-1].startswith("healthy")
    assert all(line.startswith(("  ", "healthy")) for line in lines[1:]), lines
    assert err == ""


def test_doctor_finds_a_duplicate_legacy_plugin(tmp_path, monkeypatch, capsys):
    install_fake_distribution(
        tmp_path, "tbp-nightly", "2.13.0a20230101",
        "[tensorboard_plugins]\nprofile = tensorboard_plugin_profile.profile_plugin_loader:ProfilePluginLoader\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rc = cli_main(["doctor", "--no-capture", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 1 and not report["healthy"]
    failed = {c["name"]: c for c in report["checks"] if c["status"] == "fail"}
    assert "one profile plugin" in failed and "tbp-nightly" in failed["one profile plugin"]["detail"]
    assert "pip uninstall -y tbp-nightly" in failed["one profile plugin"]["fix"]
    assert "no legacy profile packages" in failed


def test_doctor_finds_version_skew(tmp_path, monkeypatch, capsys):
    install_fake_distribution(tmp_path, "xprof", "2.0.0")
    monkeypatch.syspath_prepend(str(tmp_path))
    rc = cli_main(["doctor", "--no-capture"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "FAIL  one copy of xprof" in out
    assert "FAIL  version skew" in out and "xprof 2.0.0" in out
    assert "fix:" in out


@pytest.mark.parametrize("missing", ["tensorboard"])
def test_doctor_version_check_reports_missing(missing):
    checks = doctor.check_versions({})
    assert any(c.status == "fail" and missing in c.detail and "pip install" in c.fix for c in checks)
