"""Started by `xladev tui` and `xladev attach` in the job's Python (this folder is on its PYTHONPATH).

It costs one meta-path entry: nothing of xladev is imported unless the job imports `torch_xla`. Then, for a
real torch_xla, xladev is imported (from XLADEV_ATTACH_HOME when the job's Python does not have it installed:
only the `xladev` package is taken from there, not the rest of its environment) and attaches. Any other
sitecustomize on the path runs as well.
"""

import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


class _XladevAttachBoot:
    def find_spec(self, name, path=None, target=None):
        if name != "torch_xla":
            return None
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _XladevAttachBoot)]
        spec = importlib.util.find_spec("torch_xla")
        if spec is None or "torch_xla_alias" in (spec.origin or "").replace("\\", "/").split("/"):
            return spec  # none, or xladev's own alias (`xladev run`): nothing to attach to
        os.environ["XLADEV_ATTACH"] = "1"  # before xladev is imported: its runtime must not start with torch
        try:
            _import_xladev()
            from xladev.attach._hook import TorchXlaHook, wrapped_spec

            TorchXlaHook.remove()
            return wrapped_spec()
        except Exception as exc:  # never the reason a job fails
            sys.stderr.write(f"xladev attach: cannot load xladev ({type(exc).__name__}: {exc}); "
                             "the run goes on unobserved\n")
            return None


def _import_xladev():
    if "xladev" in sys.modules or importlib.util.find_spec("xladev") is not None:
        return
    home = os.environ.get("XLADEV_ATTACH_HOME", "")
    init = os.path.join(home, "xladev", "__init__.py")
    spec = importlib.util.spec_from_file_location("xladev", init,
                                                  submodule_search_locations=[os.path.dirname(init)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["xladev"] = module
    spec.loader.exec_module(module)


def _chain_next_sitecustomize():
    """Runs the sitecustomize this one hides (a distribution's own), as if this one were not there."""
    saved = list(sys.path)
    mine = sys.modules.pop("sitecustomize", None)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
        spec = importlib.util.find_spec("sitecustomize")
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
    except Exception as exc:
        sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}\n")
    finally:
        sys.path[:] = saved
        if mine is not None:
            sys.modules["sitecustomize"] = mine


sys.meta_path.insert(0, _XladevAttachBoot())
_chain_next_sitecustomize()
