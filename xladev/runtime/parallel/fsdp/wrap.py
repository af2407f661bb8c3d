"""Auto-wrap policies for FSDP (PyTorch/XLA's `torch_xla.distributed.fsdp.wrap`).

A policy is called as `policy(module=m, recurse=..., unwrapped_params=n)`: with `recurse=True` it says whether to
look inside `m` for submodules to wrap, with `recurse=False` whether to wrap `m` itself, given the `n`
parameters of `m` not yet wrapped by a submodule's FSDP. `recursive_wrap` walks the module tree bottom-up, so
inner modules are wrapped before the module around them, as FSDP needs.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch.nn as nn


def always_wrap_policy(*args: Any, **kwargs: Any) -> bool:
    """Wraps every submodule as its own FSDP unit."""
    return True


def lambda_auto_wrap_policy(module: nn.Module, recurse: bool, unwrapped_params: int,
                            lambda_fn: Callable[[nn.Module], bool]) -> bool:
    """Wraps each submodule for which `lambda_fn(submodule)` is true (bind `lambda_fn` with functools.partial).

    Returns:
      True to look inside any module; for a module itself, `lambda_fn(module)`.
    """
    return True if recurse else bool(lambda_fn(module))


def transformer_auto_wrap_policy(module: nn.Module, recurse: bool, unwrapped_params: int,
                                 transformer_layer_cls: Iterable[type]) -> bool:
    """Wraps each submodule that is an instance of one of `transformer_layer_cls` (a transformer's blocks);
    the rest stays with the outer FSDP.

    Returns:
      True to look inside any module; for a module itself, whether it is such an instance.
    """
    return True if recurse else isinstance(module, tuple(transformer_layer_cls))


def size_based_auto_wrap_policy(module: nn.Module, recurse: bool, unwrapped_params: int,
                                min_num_params: int = int(1e8), force_leaf_modules: set | None = None,
                                exclude_wrap_modules: set | None = None) -> bool:
    """Wraps each submodule holding at least `min_num_params` parameters not yet wrapped.

    Args:
      module, recurse, unwrapped_params: as every policy (the module docstring).
      min_num_params: the size from which a module gets its own FSDP.
      force_leaf_modules: module types never looked inside (default `FORCE_LEAF_MODULES`: MultiheadAttention).
      exclude_wrap_modules: module types never wrapped (default `EXCLUDE_WRAP_MODULES`: ModuleList, ModuleDict).

    Returns:
      Whether to look inside `module` (recurse) or to wrap it.
    """
    leaves = size_based_auto_wrap_policy.FORCE_LEAF_MODULES if force_leaf_modules is None else force_leaf_modules
    excluded = (size_based_auto_wrap_policy.EXCLUDE_WRAP_MODULES if exclude_wrap_modules is None
                else exclude_wrap_modules)
    if unwrapped_params < min_num_params:
        return False
    return not isinstance(module, tuple(leaves if recurse else excluded))


size_based_auto_wrap_policy.EXCLUDE_WRAP_MODULES = {nn.ModuleList, nn.ModuleDict}
size_based_auto_wrap_policy.FORCE_LEAF_MODULES = {nn.MultiheadAttention}


def _wrap(module: nn.Module, wrapper_cls: Callable, **kwargs: Any) -> nn.Module:
    # A module may carry `_wrap_overrides`: FSDP arguments of its own (PyTorch/XLA's way to keep a BatchNorm
    # in float32 under a lower compute dtype).
    overrides = getattr(module, "_wrap_overrides", None)
    return wrapper_cls(module, **{**kwargs, **overrides}) if overrides else wrapper_cls(module, **kwargs)


def recursive_wrap(module: nn.Module, auto_wrap_policy: Callable, wrapper_cls: Callable,
                   ignored_modules: Iterable[nn.Module] = (), ignored_params: Iterable[nn.Parameter] = (),
                   only_wrap_children: bool = False, **kwargs: Any) -> tuple[nn.Module, int]:
    """Wraps the submodules of `module` that `auto_wrap_policy` picks, innermost first.

    Args:
      module: the module to walk.
      auto_wrap_policy: the policy (see the module docstring).
      wrapper_cls: what wraps a picked module (FSDP, or `auto_wrapper_callable`), called as
        `wrapper_cls(module, **kwargs)`.
      ignored_modules, ignored_params: left alone and not counted.
      only_wrap_children: never wrap `module` itself (the root, which the caller wraps).
      **kwargs: passed to `wrapper_cls`.

    Returns:
      (the module, wrapped or not; the number of its parameters now inside a wrapper).
    """
    ignored_modules = set(ignored_modules)
    ignored_params = set(ignored_params)
    total = sum(p.numel() for p in module.parameters() if p not in ignored_params)
    if not auto_wrap_policy(module=module, recurse=True, unwrapped_params=total):
        return module, 0
    wrapped = 0
    for name, child in module.named_children():
        if child in ignored_modules:
            continue
        new_child, count = recursive_wrap(child, auto_wrap_policy, wrapper_cls, ignored_modules, ignored_params,
                                          **kwargs)
        setattr(module, name, new_child)
        wrapped += count
    if not only_wrap_children and auto_wrap_policy(module=module, recurse=False, unwrapped_params=total - wrapped):
        return _wrap(module, wrapper_cls, **kwargs), total
    return module, wrapped
