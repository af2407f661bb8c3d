"""`torch_xla.core` on xladev: `xla_model` (`xm`) is the module scripts use."""

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__, submodules=("dynamo_bridge", "xla_builder", "xla_env_vars",
                                                          "xla_model"))
