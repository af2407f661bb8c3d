"""Record event logs of real torch_xla runs through `xladev attach`, as fixtures of the default suite.

    python tools/record_torch_xla_attach.py --python ~/txla/bin/python            # all scenarios
    python tools/record_torch_xla_attach.py --python ~/txla/bin/python healthy    # one

Each scenario is one of the real PyTorch/XLA 2.9 runs of `tests/fixtures/torch_xla` (`scenarios.py`,
`mistakes.py`; their README says what is wrong in each), run with PJRT_DEVICE=CPU under `xladev attach`. The
log goes to `tests/fixtures/torch_xla/attach/NAME.attach.jsonl`, with paths rewritten to the neutral ones the
other fixtures use (`/home/user/run/` for the script, `/opt/venv/` for the torch_xla environment), so that
`make test` reads them without torch_xla. `make test-torch-xla` runs the same scenarios live instead.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "torch_xla"
OUT = FIXTURES / "attach"
# The scenarios and what a right diagnosis of each says: tests/attach/expectations.py (the runs whose debug-log and
# metrics outputs are fixtures already, so the two paths can be compared on the same scenarios).
sys.path.insert(0, str(ROOT))
from tests.attach.expectations import EXPECTED as SCENARIOS  # noqa: E402

RUN_DIR = "/home/user/run"
VENV_DIR = "/opt/venv"


def record(python: str, name: str, out: Path, timeout: float) -> Path:
    """Runs one scenario under `xladev attach` and writes its neutral log to `out/NAME.events.jsonl`.

    Raises:
      RuntimeError: the run failed (its output is in the message).
    """
    expected = SCENARIOS[name]
    script = expected.script
    venv = str(Path(python).resolve().parent.parent)
    with tempfile.TemporaryDirectory(prefix="xladev_attach_") as tmp:
        shutil.copy(FIXTURES / script, tmp)
        log = Path(tmp) / f"{name}.events.jsonl"
        env = dict(os.environ, PJRT_DEVICE="CPU")
        flags = ["--graphs"] if expected.graphs else []
        done = subprocess.run([sys.executable, "-m", "xladev.cli.main", "attach", *flags, "--log", str(log), "--",
                               python, script, expected.scenario or name], cwd=tmp, env=env, capture_output=True,
                              text=True, timeout=timeout)
        if done.returncode != 0 or not log.exists():
            raise RuntimeError(f"{name}: exit {done.returncode}\n{done.stderr[-3000:]}")
        text = log.read_text()
    text = text.replace(tmp, RUN_DIR).replace(venv, VENV_DIR).replace(os.uname().nodename, "host")
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{name}.attach.jsonl"  # not *.events.jsonl, which .gitignore keeps out of the repository
    target.write_text(text)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", required=True, help="a Python with torch_xla installed (2.5 to 2.9)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"where the logs go (default {OUT})")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run (default 900)")
    parser.add_argument("names", nargs="*", choices=[[], *SCENARIOS], help="scenarios (default: all)")
    args = parser.parse_args(argv)
    for name in args.names or SCENARIOS:
        print(record(args.python, name, args.out, args.timeout), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
