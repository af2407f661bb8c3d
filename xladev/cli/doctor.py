"""`xladev doctor`: is this machine able to capture profiles and show them in TensorBoard?

Checks, and says what to fix:
- the installed versions of tensorboard, tensorboard-plugin-profile, xprof, protobuf, jax and jaxlib;
- version skew: every requirement of tensorboard, tensorboard-plugin-profile and xprof is met by what is
  installed (tensorboard-plugin-profile pins xprof exactly; tensorboard bounds protobuf);
- duplicate plugins: several distributions registering TensorBoard's `profile` plugin (an old
  tbp-nightly or tensorboard-plugin-profile next to xprof), or two copies of one distribution on the path;
- that TensorBoard's profile plugin and xprof's converter import;
- a real capture on this machine: an in-process trace of a small xla step, and a capture through a
  profiler server, each read back with xprof and checked for the runtime's events.

Exit code 0 when healthy (warnings allowed), 1 when a check failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time

PROFILE_PACKAGES = ("tensorboard", "tensorboard-plugin-profile", "xprof", "protobuf", "jax", "jaxlib")
REQUIRED = ("tensorboard", "tensorboard-plugin-profile", "xprof", "protobuf")
SKEW_CHECKED = ("tensorboard", "tensorboard-plugin-profile", "xprof")
# Distributions that also register TensorBoard's `profile` plugin and must not sit next to xprof.
LEGACY_PROFILE_DISTS = ("tbp-nightly", "tensorboard-plugin-profile-nightly", "xprof-nightly")
INSTALL_FIX = "pip install tensorboard tensorboard-plugin-profile"


@dataclasses.dataclass
class Check:
    name: str
    status: str  # "ok", "warn", "fail"
    detail: str
    fix: str = ""


def _normalize(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def _all_distributions() -> dict[str, list]:
    """Every distribution on sys.path by normalized name, duplicates kept (importlib dedups them)."""
    from importlib import metadata

    found: dict[str, list] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if not name:
            continue
        found.setdefault(_normalize(name), []).append(dist)
    return found


def _location(dist) -> str:
    try:
        return str(dist.locate_file(""))
    except Exception:
        return "?"


def check_versions(dists: dict) -> list[Check]:
    checks = []
    for name in PROFILE_PACKAGES:
        copies = dists.get(_normalize(name), [])
        if not copies:
            if name in REQUIRED:
                checks.append(Check(f"{name} installed", "fail", f"{name} is not installed", INSTALL_FIX))
            else:
                checks.append(Check(f"{name} installed", "fail", f"{name} is not installed",
                                    "pip install -e . (xladev pins jax and jaxlib)"))
            continue
        checks.append(Check(f"{name} installed", "ok", f"{name} {copies[0].version}"))
    return checks


def check_duplicates(dists: dict) -> list[Check]:
    from importlib import metadata

    checks = []
    providers: dict[str, str] = {}
    for key, copies in dists.items():
        for dist in copies:
            for ep in dist.entry_points:
                if ep.group == "tensorboard_plugins" and ep.name == "profile":
                    providers[f"{dist.metadata['Name']} {dist.version}"] = ep.value
    if len(providers) > 1:
        listed = "; ".join(f"{who} ({value})" for who, value in sorted(providers.items()))
        legacy = [who.split()[0] for who in providers if not who.lower().startswith("xprof ")]
        checks.append(Check(
            "one profile plugin", "fail",
            f"{len(providers)} distributions register TensorBoard's 'profile' plugin: {listed}; TensorBoard loads "
            "one of them at random and an old one shows empty or missing profiles",
            f"pip uninstall -y {' '.join(legacy)} && {INSTALL_FIX}"))
    elif not providers:
        checks.append(Check("one profile plugin", "fail",
                            "no distribution registers TensorBoard's 'profile' plugin (no Profile tab)", INSTALL_FIX))
    else:
        (who, value), = providers.items()
        checks.append(Check("one profile plugin", "ok", f"{who} provides it ({value})"))
    legacy = [n for n in LEGACY_PROFILE_DISTS if n in dists]
    if legacy:
        checks.append(Check("no legacy profile packages", "fail",
                            "installed next to the current plugin: " + ", ".join(
                                f"{n} {dists[n][0].version}" for n in legacy),
                            f"pip uninstall -y {' '.join(legacy)}"))
    for name in PROFILE_PACKAGES:
        copies = dists.get(_normalize(name), [])
        if len(copies) > 1:
            where = "; ".join(f"{d.version} at {_location(d)}" for d in copies)
            checks.append(Check(f"one copy of {name}", "fail",
                                f"{len(copies)} copies of {name} are on the path: {where}; Python imports the "
                                "first, pip's metadata may describe another",
                                f"remove the stray copies (check PYTHONPATH and user site-packages), then {INSTALL_FIX}"))
    del metadata
    return checks


def check_skew(dists: dict) -> list[Check]:
    try:
        from packaging.requirements import Requirement
        from packaging.version import Version
    except ImportError:
        return [Check("version skew", "warn", "cannot check requirements: the 'packaging' module is missing",
                      "pip install packaging")]
    checks = []
    problems = []
    for name in SKEW_CHECKED:
        copies = dists.get(_normalize(name), [])
        if not copies:
            continue
        dist = copies[0]
        for text in dist.requires or ():
            try:
                req = Requirement(text)
            except Exception:
                continue
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            have = dists.get(_normalize(req.name))
            if not have:
                problems.append((f"{name} {dist.version} needs {req} but {req.name} is not installed",
                                 f"pip install '{req}'"))
                continue
            version = have[0].version
            try:
                ok = not req.specifier or req.specifier.contains(Version(version), prereleases=True)
            except Exception:
                ok = True
            if not ok:
                problems.append((f"{name} {dist.version} needs {req}, installed {req.name} is {version}",
                                 f"pip install '{req}'"))
    for detail, fix in problems:
        checks.append(Check("version skew", "fail", detail, fix))
    tbp = dists.get("tensorboard-plugin-profile")
    xprof = dists.get("xprof")
    if tbp and xprof and tbp[0].version != xprof[0].version:
        checks.append(Check("version skew", "fail",
                            f"tensorboard-plugin-profile {tbp[0].version} and xprof {xprof[0].version} differ (they are "
                            "released together)", f"pip install 'xprof=={tbp[0].version}'"))
    if not checks:
        checks.append(Check("version skew", "ok",
                            "the requirements of tensorboard, tensorboard-plugin-profile and xprof are met"))
    return checks


def check_imports() -> list[Check]:
    checks = []
    from importlib import metadata

    try:
        import google.protobuf

        checks.append(Check("protobuf imports", "ok", f"google.protobuf {google.protobuf.__version__}"))
    except Exception as exc:
        checks.append(Check("protobuf imports", "fail", f"import google.protobuf failed: {exc}", INSTALL_FIX))
    loaded = False
    for ep in metadata.entry_points(group="tensorboard_plugins"):
        if ep.name != "profile":
            continue
        try:
            ep.load()
            checks.append(Check("profile plugin loads", "ok", f"{ep.value}"))
        except Exception as exc:
            checks.append(Check("profile plugin loads", "fail", f"loading {ep.value} failed: {type(exc).__name__}: "
                                f"{exc} (often a protobuf version that the plugin does not accept)", INSTALL_FIX))
        loaded = True
        break
    if not loaded:
        checks.append(Check("profile plugin loads", "fail", "no 'profile' TensorBoard plugin is registered", INSTALL_FIX))
    try:
        import importlib

        for module in ("xprof.convert._pywrap_profiler_plugin", "xprof.convert.raw_to_tool_data"):
            importlib.import_module(module)

        checks.append(Check("xprof converter imports", "ok", "xprof.convert (capture client and trace reader)"))
    except Exception as exc:
        checks.append(Check("xprof converter imports", "fail", f"{type(exc).__name__}: {exc}", INSTALL_FIX))
    exe = shutil.which("tensorboard")
    beside = os.path.join(os.path.dirname(sys.executable), "tensorboard")
    if exe:
        checks.append(Check("tensorboard command", "ok", exe))
    elif os.path.exists(beside):
        checks.append(Check("tensorboard command", "warn", f"not on PATH; it is at {beside}",
                            f"activate the environment, or run {beside} --logdir DIR"))
    else:
        checks.append(Check("tensorboard command", "fail", "no tensorboard executable found", INSTALL_FIX))
    return checks


def _small_steps(seconds: float = 0.0, steps: int = 3) -> None:
    import torch

    import xladev
    import xladev.debug.profiler as xp

    device = xladev.device()
    x = torch.ones(16, 16).to(device)
    end = time.monotonic() + seconds
    i = 0
    while i < steps or time.monotonic() < end:
        with xp.StepTrace("doctor", step_num=i):
            x = (x @ x).tanh()
        i += 1


def check_capture() -> list[Check]:
    from xladev.debug import _profiler_capture
    from xladev.debug._profiler_common import ProfilerError, check_profile, hlo_modules

    checks = []
    with tempfile.TemporaryDirectory(prefix="xladev_doctor_") as logdir:
        try:
            _small_steps(steps=2)  # compile outside the trace
            _profiler_capture.start_trace(logdir, _owner="xladev doctor")
            try:
                _small_steps(steps=3)
            finally:
                path = _profiler_capture.stop_trace()
            summary = check_profile(path, quiet=True)
            wanted = ["xladev.execute", "xladev.mark_step", "doctor 2"]
            missing = [w for w in wanted if not summary.has(w)]
            modules = hlo_modules(path, quiet=True)
            if missing:
                checks.append(Check("in-process capture", "fail",
                                    f"the profile has {summary.num_events} events but lacks {missing}",
                                    "reinstall matching jax/jaxlib and xprof, then run `xladev doctor` again"))
            elif not any(m.startswith("jit_xladev_") for m in modules):
                checks.append(Check("in-process capture", "fail",
                                    f"the profile has {summary.num_events} events but no HLO module of the graphs "
                                    "it ran (graph viewer, memory viewer would be empty)",
                                    "reinstall matching jax/jaxlib and xprof, then run `xladev doctor` again"))
            else:
                checks.append(Check("in-process capture", "ok", f"{summary.num_events} events read back with xprof, "
                                    f"xladev annotations present, {len(modules)} HLO module(s) for the graph viewer"))
        except ProfilerError as exc:
            checks.append(Check("in-process capture", "fail", str(exc).splitlines()[0],
                                "see the message; reinstall with " + INSTALL_FIX))
        except Exception as exc:
            checks.append(Check("in-process capture", "fail", f"{type(exc).__name__}: {exc}", INSTALL_FIX))
    checks.append(_check_server_capture())
    return checks


def _check_server_capture() -> Check:
    from xladev.debug import _profiler_capture, _profiler_server
    from xladev.debug._profiler_common import ProfilerError, summarize

    with tempfile.TemporaryDirectory(prefix="xladev_doctor_") as logdir:
        server = None
        try:
            server = _profiler_server.start_server(0)
            handle = _profiler_capture.trace_detached(server.address, logdir, duration_ms=400, num_tracing_attempts=2,
                                                      report_errors=False, timeout_s=30)
            deadline = time.monotonic() + 40
            while not handle.done and time.monotonic() < deadline:
                _small_steps(seconds=0.05)
            if not handle.done:
                return Check("capture through a profiler server", "fail", "the capture did not finish in 40 s",
                             "run `xladev doctor` again; if it persists, reinstall " + INSTALL_FIX)
            if handle.error is not None:
                return Check("capture through a profiler server", "fail", str(handle.error).splitlines()[0],
                             "jaxlib's profiler server and xprof's client must speak the same protocol: " + INSTALL_FIX)
            summary = summarize(handle.path, quiet=True)
            return Check("capture through a profiler server", "ok",
                         f"{summary.num_events} events from {server.address} read back with xprof")
        except ProfilerError as exc:
            return Check("capture through a profiler server", "fail", str(exc).splitlines()[0], INSTALL_FIX)
        except Exception as exc:
            return Check("capture through a profiler server", "fail", f"{type(exc).__name__}: {exc}", INSTALL_FIX)
        finally:
            if server is not None:
                server.stop()


def diagnose(capture: bool = True) -> list[Check]:
    dists = _all_distributions()
    checks = check_versions(dists) + check_duplicates(dists) + check_skew(dists)
    checks += check_imports()
    if capture:
        from xladev.debug._profiler_common import quiet_native_stderr

        with quiet_native_stderr():
            checks += check_capture()
    return checks


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("doctor", help="check the profiling stack: versions, duplicate plugins, a capture",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-capture", action="store_true", help="skip the real captures (package checks only)")
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    return parser


def run(args: argparse.Namespace) -> int:
    checks = diagnose(capture=not args.no_capture)
    failed = [c for c in checks if c.status == "fail"]
    if args.json:
        print(json.dumps({"healthy": not failed, "checks": [dataclasses.asdict(c) for c in checks]}, indent=2))
        return 1 if failed else 0
    print("xladev doctor: profiling stack (TensorBoard, xprof, jax)")
    labels = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}
    for c in checks:
        print(f"  {labels[c.status]}  {c.name}: {c.detail}")
        if c.fix and c.status != "ok":
            print(f"        fix: {c.fix}")
    warned = sum(c.status == "warn" for c in checks)
    if failed:
        print(f"{len(failed)} problem(s) found; apply the fixes above and run `xladev doctor` again.")
        return 1
    print("healthy" + (f" ({warned} warning(s))" if warned else "") + ": profiles can be captured here and shown with "
          "`tensorboard --logdir DIR`")
    return 0
