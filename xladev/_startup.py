"""Starting the runtime: register the `xla` device with torch, start the sinks the flags ask for.

Kept out of `xladev/__init__.py`, which starts it on first use only: the file readers (`xladev
report`, `diff`, `tui`) import the package without torch or jax.
"""

from __future__ import annotations


def start_sinks() -> None:
    """Subscribes the sinks the flags ask for to the runtime's event bus (the runtime never calls them)."""
    from xladev._flags import config

    if config.metrics_enabled or config.metrics_file:
        from xladev.sinks.metrics_registry import sink

        sink.start()
    from xladev.sinks.pt_xla_debug.sink import start_from_flags

    start_from_flags()
    if config.save_tensors_file:
        from xladev.sinks import save_tensors

        save_tensors.start_from_flags()
    if config.event_log:
        from xladev.sinks import eventlog_writer as eventlog

        eventlog.start_from_flags()
    if config.profile_steps:
        from xladev.debug import _profiler_steps

        _profiler_steps.start_from_flags()


def check_output_paths(config) -> None:
    """Start-up check of files xladev writes only later (on a failure), so a typo shows now, not then.

    Raises:
      ConfigError: XLA_SAVE_HLO_FILE names a file that cannot be written.
    """
    import os

    from xladev._flags import ConfigError

    path = config.save_hlo_file
    if not path:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        problem = "it is a directory"
    elif os.path.exists(path):
        problem = "" if os.access(path, os.W_OK) else "the file is not writable"
    elif not os.path.isdir(folder):
        problem = f"its directory {folder} does not exist"
    else:
        problem = "" if os.access(folder, os.W_OK) else f"its directory {folder} is not writable"
    if problem:
        raise ConfigError(f"XLA_SAVE_HLO_FILE={path!r} cannot be written: {problem}. "
                          "(where the HLO of a failing graph is saved)")


def install_config_error_hook() -> None:
    """A `ConfigError` nobody caught (a bad environment variable) prints its message, not a traceback.

    It is the user's setting that is wrong, not their code or xladev's, so the traceback only hides the
    one line that says which variable and why. Other exceptions go to the previous hook unchanged.
    """
    import sys

    previous = sys.excepthook

    def hook(kind, value, traceback):
        # Matched by name: the flags module may have failed while importing (a bad variable read at import).
        if any(c.__name__ == "ConfigError" and c.__module__ == "xladev._flags" for c in kind.__mro__):
            sys.stderr.write(f"xladev: {value}\n")
            return
        previous(kind, value, traceback)

    if getattr(previous, "__name__", "") != "xladev_config_error_hook":
        hook.__name__ = "xladev_config_error_hook"
        sys.excepthook = hook


def load() -> None:
    """Starts the runtime: registers the `xla` device with torch, starts the sinks the flags ask for."""
    install_config_error_hook()
    from xladev._flags import config
    from xladev.runtime.compile.compilation import initialize_cache
    from xladev.runtime.device import register

    check_output_paths(config)
    register()
    from xladev.runtime.record.module_conversion import install

    install()
    from xladev.runtime.distributed.process_group import register as register_process_group

    register_process_group()  # torch.distributed's `xla` backend and `xla://`, as torch_xla registers them
    from xladev.runtime.distributed.functional_collectives import register as register_functional_collectives

    register_functional_collectives()  # torch.distributed's functional collectives on xla tensors
    from xladev.runtime.execute import exiting

    exiting.install()  # before the sinks: their end-of-run records come after the runtime's last settling
    start_sinks()
    if config.compilation_cache_dir:
        initialize_cache(config.compilation_cache_dir)
