"""One registry for every setting: environment variable, API and context-manager override.

In the manner of jax's config: each flag is declared once with its environment variable, type,
default and help. Values are read from the environment at import, validated, and can be overridden
with `xladev.config.update(name, value)` or, scoped, `with xladev.config.override(name=value): ...`.
A malformed environment value raises `ConfigError` naming the variable.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from typing import Any, Callable, Iterator

from xladev.errors import XladevError
from xladev.schema.metrics_text import DEFAULT_PERCENTILES
from xladev.schema.units import parse_memory_size

_TRUE_WORDS = {"1", "true", "yes", "on", "y", "t"}
_FALSE_WORDS = {"0", "false", "no", "off", "n", "f", ""}


class ConfigError(XladevError, ValueError):
    """A setting (usually an environment variable) has a value xladev cannot use."""


def _parse_bool(text: str) -> bool:
    word = text.strip().lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    raise ValueError(f"expected a boolean (1/0, true/false, yes/no, on/off), got {text!r}")


def _parse_int(text: str) -> int:
    word = text.strip()
    lowered = word.lower()
    # A truthy word is accepted where a level is expected: PT_XLA_DEBUG=true means level 1.
    if lowered in _TRUE_WORDS - {"1"}:
        return 1
    if lowered in _FALSE_WORDS - {"0", ""}:
        return 0
    try:
        return int(word)
    except ValueError:
        raise ValueError(f"expected an integer, got {text!r}") from None


def _parse_str(text: str) -> str:
    return text


@dataclasses.dataclass(frozen=True)
class Flag:
    """Declaration of one setting.

    Attributes:
      name: the API name (`debug_level`).
      env: the environment variable (`PT_XLA_DEBUG_LEVEL`), or None for API-only flags.
      parse: turns the environment text into a value; raises ValueError with a reason.
      default: the value when the variable is unset.
      help: one line for the reference docs.
      choices: allowed values, if the set is closed.
    """

    name: str
    env: str | None
    parse: Callable[[str], Any]
    default: Any
    help: str
    choices: tuple | None = None


class _Overrides(threading.local):
    """A thread's stack of `Config.override` layers (the class attribute: a new thread's, none)."""

    stack: list | None = None


class _Setting:
    """Reads one flag as an attribute of the registry (`config.debug_level`), overrides first.

    A descriptor on the class: left to `__getattr__`, every read of a flag first failed the normal lookup, an
    AttributeError raised and caught inside Python, about 2 us of each of the several reads per graph run.
    """

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, config: "Config | None", owner=None) -> Any:
        if config is None:
            return self
        name = self.name
        overrides = config._local.stack
        if overrides:
            for layer in reversed(overrides):
                if name in layer:
                    return layer[name]
        try:
            return config._values[name]
        except KeyError:  # another registry's flag
            raise AttributeError(f"xladev has no setting {name!r}") from None


class Config:
    """The flag registry. Read values as attributes: `config.debug_level`."""

    def __init__(self) -> None:
        self._flags: dict[str, Flag] = {}
        self._values: dict[str, Any] = {}
        self._local = _Overrides()
        self._listeners: list[Callable[[str, Any], None]] = []

    def define(self, flag: Flag) -> None:
        existing = getattr(type(self), flag.name, None)
        if existing is not None and not isinstance(existing, _Setting):
            raise ValueError(f"flag {flag.name!r} would hide Config.{flag.name}")
        self._flags[flag.name] = flag
        self._values[flag.name] = self._from_env(flag)
        if existing is None:
            setattr(type(self), flag.name, _Setting(flag.name))

    def _from_env(self, flag: Flag) -> Any:
        raw = os.environ.get(flag.env) if flag.env else None
        if raw is None:
            return flag.default
        try:
            value = flag.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{flag.env}={raw!r} is not valid: {exc}. ({flag.help})") from None
        self._check_choice(flag, value, f"{flag.env}={raw!r}")
        return value

    @staticmethod
    def _check_choice(flag: Flag, value: Any, shown: str) -> None:
        if flag.choices is not None and value not in flag.choices:
            allowed = ", ".join(str(c) for c in flag.choices)
            raise ConfigError(f"{shown} is not valid: expected one of {allowed}. ({flag.help})")

    def __getattr__(self, name: str) -> Any:
        # Only names no flag defines get here (each flag is a `_Setting` on the class).
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"xladev has no setting {name!r}")

    def flag(self, name: str) -> Flag:
        return self._flags[name]

    def flags(self) -> list[Flag]:
        return list(self._flags.values())

    def update(self, name: str, value: Any) -> None:
        """Sets a flag for the rest of the process.

        Args:
          name: the flag's API name.
          value: the new value (already typed, not text).

        Raises:
          ConfigError: unknown flag, or a value outside the flag's choices.
        """
        if name not in self._flags:
            raise ConfigError(f"xladev has no setting {name!r}")
        self._check_choice(self._flags[name], value, f"{name}={value!r}")
        self._values[name] = value
        for listener in self._listeners:
            listener(name, value)

    @contextlib.contextmanager
    def override(self, **values: Any) -> Iterator[None]:
        """Overrides flags in this thread for the duration of the block."""
        for name, value in values.items():
            if name not in self._flags:
                raise ConfigError(f"xladev has no setting {name!r}")
            self._check_choice(self._flags[name], value, f"{name}={value!r}")
        stack = self._local.stack
        if stack is None:
            stack = self._local.stack = []
        stack.append(values)
        self._notify(values)
        try:
            yield
        finally:
            stack.pop()
            self._notify(values)

    def _notify(self, names) -> None:
        # Hot paths cache some flags; tell them the effective value after an override starts or ends.
        for name in names:
            value = getattr(self, name)
            for listener in self._listeners:
                listener(name, value)

    def reload_from_env(self) -> None:
        """Re-reads every flag from the environment (tests and child processes use this)."""
        for flag in self._flags.values():
            self._values[flag.name] = self._from_env(flag)

    def on_update(self, listener: Callable[[str, Any], None]) -> None:
        self._listeners.append(listener)


def _parse_upper(text: str) -> str:
    return text.strip().upper()


def _parse_percentiles(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(part) for part in text.split(":") if part.strip())
    except ValueError:
        raise ValueError(f"expected numbers separated by ':', got {text!r}") from None
    if not values or any(not 0.0 <= v <= 1.0 for v in values):
        raise ValueError("each percentile must be between 0 and 1")
    return values


def _parse_positive_int(text: str) -> int:
    value = _parse_int(text)
    if value <= 0:
        raise ValueError(f"expected a positive integer, got {text!r}")
    return value


def _parse_positive_float(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise ValueError(f"expected a positive number of seconds, got {text!r}")
    return value


def _parse_memory_limit(text: str) -> int | None:
    return parse_memory_size(text) if text.strip() else None


def _parse_step_window(text: str) -> tuple[int, int] | None:
    word = text.strip()
    if not word:
        return None
    first, sep, last = word.partition(":")
    if not sep or not first.strip().isdigit() or not last.strip().isdigit():
        raise ValueError("expected START:STOP step numbers, e.g. 5:8 (profiles steps 5, 6 and 7)")
    start, stop = int(first), int(last)
    if stop <= start:
        raise ValueError(f"STOP must be greater than START (steps START..STOP-1 are profiled), got {text!r}")
    return start, stop


config = Config()

_DEFINITIONS = [
    Flag("pjrt_device", "PJRT_DEVICE", _parse_upper, "CPU", "backend for the xla device: CPU or CUDA",
         choices=("CPU", "CUDA", "GPU")),
    Flag("cpu_num_devices", "CPU_NUM_DEVICES", _parse_positive_int, None,
         "xla devices of this process on the CPU backend (xla:0..N-1); unset: jax's default (1, or XLA_FLAGS' "
         "--xla_force_host_platform_device_count)"),
    Flag("coordinator_address", "XLADEV_COORDINATOR_ADDRESS", lambda s: s.strip(), "",
         "HOST:PORT of jax's coordinator (run by rank 0) for a job of several processes; unset: rank 0 picks a port "
         "on MASTER_ADDR and hands it out through the store at MASTER_ADDR:MASTER_PORT"),
    Flag("dist_timeout", "XLADEV_DIST_TIMEOUT", _parse_positive_float, 300.0,
         "seconds the processes of a job wait for each other to join, and for a rank that stopped answering"),
    Flag("preemption_grace", "XLADEV_PREEMPTION_GRACE", _parse_positive_float, 60.0,
         "seconds a SIGTERM is held back for a CheckpointManager's checkpoint on preemption before it ends the "
         "process anyway"),
    Flag("debug", "PT_XLA_DEBUG", _parse_bool, False, "turn on every debug output (as level 2)"),
    Flag("debug_level", "PT_XLA_DEBUG_LEVEL", _parse_int, 0,
         "0 off, 1 compile analysis, 2 adds execution analysis", choices=(0, 1, 2)),
    Flag("debug_file", "PT_XLA_DEBUG_FILE", _parse_str, "", "append debug analysis to this file instead of stderr"),
    Flag("debug_max_frame", "PT_XLA_DEBUG_MAX_FRAME", _parse_positive_int, 8, "most Python frames shown per block"),
    Flag("metrics_file", "XLA_METRICS_FILE", _parse_str, "", "append the metrics report per step (path, STDOUT or STDERR)"),
    Flag("metrics_samples", "XLA_METRICS_SAMPLES", _parse_positive_int, 1024, "samples kept per metric"),
    Flag("metrics_percentiles", "XLA_METRICS_PERCENTILES", _parse_percentiles,
         DEFAULT_PERCENTILES, "percentiles in the metrics report, ':'-separated"),
    Flag("save_tensors_file", "XLA_SAVE_TENSORS_FILE", _parse_str, "", "append each synced graph to this file"),
    Flag("save_tensors_fmt", "XLA_SAVE_TENSORS_FMT", lambda s: s.strip().lower(), "text",
         "graph dump format", choices=("text", "dot", "hlo", "stablehlo")),
    Flag("ir_debug", "XLA_IR_DEBUG", _parse_bool, False, "record the user source line of each IR node"),
    Flag("hlo_debug", "XLA_HLO_DEBUG", _parse_bool, False, "carry source lines into HLO metadata"),
    Flag("save_hlo_file", "XLA_SAVE_HLO_FILE", _parse_str, "", "where the HLO of a failing graph is saved"),
    Flag("no_special_scalars", "XLA_NO_SPECIAL_SCALARS", _parse_bool, False,
         "feed 0, 1 and -1 as graph inputs too, instead of baking them in as constants"),
    Flag("param_aliasing", "XLA_ENABLE_PARAM_ALIASING", _parse_bool, True,
         "donate the old buffers of tensors updated in place to the step's executable (input/output aliasing)"),
    Flag("eager_debug_mode", "XLA_USE_EAGER_DEBUG_MODE", _parse_bool, False, "run every op as soon as it is recorded"),
    Flag("allow_execution", "XLADEV_ALLOW_EXECUTION", _parse_bool, True,
         "0: any graph execution raises, naming its cause and line (PyTorch/XLA's _set_allow_execution(False))"),
    Flag("sync_execution", "XLADEV_SYNC_EXECUTION", _parse_bool, False,
         "wait for each graph to finish inside the barrier instead of overlapping it with the next step"),
    Flag("gc_threshold_fit", "XLADEV_GC_THRESHOLD_FIT", _parse_bool, True,
         "raise Python's youngest garbage-collection threshold above what a lazy step keeps alive until its barrier "
         "(0: leave the collector as the script set it)"),
    Flag("graph_growth_warning", "XLADEV_GRAPH_GROWTH_WARNING", _parse_int, 50_000,
         "warn when this many ops are recorded with no barrier (0: never); the limit rises to 4x the largest step"),
    Flag("device_memory_limit", "XLADEV_DEVICE_MEMORY_LIMIT", _parse_memory_limit, None,
         "device memory budget (2GB, 512MiB, bytes): a graph whose memory analysis needs more, with what else is "
         "live on the device, fails before it runs as XLA's RESOURCE_EXHAUSTED would; unset: no budget"),
    Flag("event_log", "XLADEV_EVENT_LOG", _parse_str, "", "write the JSONL event log to this path"),
    Flag("attach_graphs", "XLADEV_ATTACH_GRAPHS", _parse_bool, False,
         "with xladev attach: have torch_xla dump each graph's IR (XLA_SAVE_TENSORS_FILE) to say what changed at a "
         "recompilation; costs IR text per sync"),
    # Read by `xladev/__init__.py` straight from the environment (it imports no module to start): declared here to
    # be one of the registry's, documented and checked like the others.
    Flag("attach", "XLADEV_ATTACH", _parse_bool, False,
         "set by xladev's adapter in a process that imports a real torch_xla: xladev's own runtime is not started "
         "there"),
    Flag("metrics_enabled", "XLADEV_METRICS", _parse_bool, True, "keep the always-on counters and metrics"),
    Flag("compilation_cache_dir", "XLADEV_COMPILATION_CACHE", _parse_str, "", "persistent compilation cache directory"),
    Flag("profile_steps", "XLADEV_PROFILE_STEPS", _parse_step_window, None,
         "profile steps START..STOP-1 in-process (START:STOP, e.g. 5:8) into XLADEV_PROFILE_DIR"),
    Flag("profile_dir", "XLADEV_PROFILE_DIR", _parse_str, "xladev_profile", "log directory of XLADEV_PROFILE_STEPS"),
]
for _flag in _DEFINITIONS:
    config.define(_flag)
