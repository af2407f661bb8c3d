"""The import hook that attaches xladev when the job imports a real torch_xla (not xladev's alias)."""

from __future__ import annotations

import importlib.util
import sys


class TorchXlaHook:
    """A meta-path finder for `torch_xla` alone: it finds nothing itself, but wraps the loader the other finders
    give, so that the adapter attaches right after torch_xla is imported and its settings are in place before.
    It removes itself at its first use."""

    @classmethod
    def install(cls) -> None:
        if not any(isinstance(finder, cls) for finder in sys.meta_path):
            sys.meta_path.insert(0, cls())

    @classmethod
    def remove(cls) -> None:
        sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, cls)]

    def find_spec(self, name, path=None, target=None):
        if name != "torch_xla":
            return None
        self.remove()
        return wrapped_spec()


def wrapped_spec():
    """torch_xla's spec, its loader attaching the adapter after it ran; unchanged for xladev's alias."""
    from xladev.attach import is_alias, known_version, prepare_environment

    spec = importlib.util.find_spec("torch_xla")
    if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
        return spec
    if is_alias(spec.origin):
        return spec
    installed = _installed_version()
    if installed is not None and not known_version(installed):
        return spec  # told before torch_xla runs: its settings stay the job's own
    spec.loader = _ThenAttach(spec.loader, prepare_environment())
    return spec


def _installed_version() -> str | None:
    """torch_xla's version from its installed metadata, before importing it; None where it has none."""
    import importlib.metadata

    try:
        return importlib.metadata.version("torch_xla")
    except importlib.metadata.PackageNotFoundError:
        return None


class _ThenAttach:
    """A loader running the wrapped one, then attaching the adapter to the module it has just executed."""

    def __init__(self, loader, outputs) -> None:
        self._loader = loader
        self._outputs = outputs

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        from xladev.attach import attach

        try:
            attach(module, self._outputs)
        except Exception as exc:  # the job runs unobserved rather than not at all
            print(f"xladev attach: cannot observe this run ({type(exc).__name__}: {exc}); it goes on unobserved",
                  file=sys.stderr, flush=True)

    def __getattr__(self, name: str):
        return getattr(self._loader, name)
