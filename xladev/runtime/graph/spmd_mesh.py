"""Device meshes for SPMD (PyTorch/XLA's `xs.Mesh`, `xs.HybridMesh`), and the jax `Mesh` each maps to.

PyTorch/XLA checks a mesh with `assert`s: a bad mesh raises AssertionError with its message, and scripts
(and PyTorch/XLA's own tests) catch that type, so the same checks raise the same type here, raised rather
than asserted so that `python -O` (which drops asserts) still checks.
"""

from __future__ import annotations

import ast
from collections import OrderedDict
from typing import Sequence

import numpy as np

from xladev.runtime.graph import backend


class Mesh:
    """A logical mesh of this process's devices (PyTorch/XLA's `xs.Mesh`).

    Args:
      device_ids: every device's index (`xla:N`'s N on the CPU), in mesh order (row-major).
      mesh_shape: the mesh's shape; its product is the number of devices.
      axis_names: a name per mesh axis, or None (the axes are then known by their numbers).

    Raises:
      AssertionError: the ids are not every device once, the shape does not hold them, or the names are not
        one per axis, each once (PyTorch/XLA asserts these).
    """

    device_ids: np.ndarray
    mesh_shape: tuple[int, ...]
    axis_names: tuple[str, ...] | None

    def __init__(self, device_ids: Sequence[int] | np.ndarray, mesh_shape: tuple[int, ...],
                 axis_names: tuple[str, ...] | None = None) -> None:
        ids = np.asarray(list(device_ids) if not isinstance(device_ids, np.ndarray) else device_ids).flatten()
        count = len(backend.jax_devices())
        # An SPMD program runs on every device of the process, so a mesh must hold them all.
        if count != len(ids):
            raise AssertionError(f"Number of device IDs ({len(ids)}) must match the global number of devices ({count})")
        if axis_names is not None:
            if len(mesh_shape) != len(axis_names):
                raise AssertionError(f"Number of axis names ({len(axis_names)}) must match mesh dimensions "
                                     f"({len(mesh_shape)})")
            if len(set(axis_names)) != len(axis_names):
                raise AssertionError(f"Axis names must be unique, got: {tuple(axis_names)}")
        expected = int(np.prod(mesh_shape))
        if len(ids) != expected:
            raise AssertionError(f"Number of device IDs ({len(ids)}) must match mesh size ({expected})")
        if len(ids) != len(np.unique(ids)):
            raise AssertionError(f"Device IDs must be unique, got: {ids}")
        if not all(0 <= d < expected for d in ids):
            raise AssertionError(f"Device IDs must be less than mesh size ({expected}), got: {ids}")
        self.device_ids = ids
        self.mesh_shape = tuple(int(n) for n in mesh_shape)
        self.axis_names = tuple(axis_names) if axis_names is not None else None

    def size(self) -> int:
        """The number of devices."""
        return int(np.prod(self.mesh_shape))

    def shape(self) -> OrderedDict:
        """Axis name (its number when the mesh has no names) -> size."""
        keys = self.axis_names if self.axis_names is not None else range(len(self.mesh_shape))
        return OrderedDict(zip(keys, self.mesh_shape))

    def get_logical_mesh(self) -> np.ndarray:
        """The device ids laid out in the mesh's shape."""
        return self.device_ids.reshape(self.mesh_shape)

    def get_op_sharding(self, partition_spec) -> "OpSharding":
        """The sharding `partition_spec` names on this mesh, as an object (PyTorch/XLA's `OpSharding`) that
        `torch_xla._XLAC._global_tensor_from_cpu_shards` takes; `str()` is its sharding text."""
        return OpSharding(self, tuple(partition_spec))

    def get_axis_name_idx(self, name: str) -> int | None:
        """The number of the axis called `name`, None when there is none."""
        if self.axis_names is None or name not in self.axis_names:
            return None
        return self.axis_names.index(name)

    def jax_axis_names(self) -> tuple[str, ...]:
        """The names of the jax mesh's axes: the given names, or `dim0`, `dim1`... for a mesh without."""
        return self.axis_names if self.axis_names is not None else tuple(f"dim{i}" for i in range(len(self.mesh_shape)))

    def key(self) -> tuple:
        """A hashable identity of the mesh (graph templates hold it)."""
        return (tuple(int(i) for i in self.device_ids), self.mesh_shape, self.jax_axis_names())

    def jax_mesh(self):
        """The jax `Mesh` of these devices."""
        return jax_mesh_of(self.key())

    get_jax_mesh = jax_mesh  # PyTorch/XLA's name

    def __str__(self) -> str:
        return (f"{{'device_ids': {self.device_ids.tolist()}, 'mesh_shape': {self.mesh_shape}, "
                f"'axis_names': {self.axis_names}}}")

    def __repr__(self) -> str:
        return f"Mesh(devices={self.device_ids.tolist()}, shape={dict(self.shape())})"

    @classmethod
    def from_str(cls, mesh_str: str) -> "Mesh | None":
        """The mesh that `str(mesh)` printed; None for text that is not one."""
        try:
            fields = ast.literal_eval(mesh_str.replace("Mesh", ""))
            return cls(np.array(fields["device_ids"]), fields["mesh_shape"], fields["axis_names"])
        except (ValueError, SyntaxError, KeyError, TypeError):
            return None


class HybridMesh(Mesh):
    """A mesh over devices joined by fast links (ICI) inside a slice and slower ones (DCN) between slices
    (PyTorch/XLA's `xs.HybridMesh`). This process's devices form one slice, so `dcn_mesh_shape` must be all 1s
    and the mesh is the devices in order.

    Args:
      ici_mesh_shape: the mesh's shape inside the slice.
      dcn_mesh_shape: the mesh's shape across slices (default all 1s).
      axis_names: a name per mesh axis, or None.

    Raises:
      AssertionError: the two shapes have different lengths, or `Mesh`'s checks fail.
      ValueError: `dcn_mesh_shape` asks for several slices (PyTorch/XLA's message).
    """

    def __init__(self, *, ici_mesh_shape: tuple[int, ...], dcn_mesh_shape: tuple[int, ...] | None = None,
                 axis_names: tuple[str, ...] | None = None) -> None:
        if dcn_mesh_shape is None:
            dcn_mesh_shape = (1,) * len(ici_mesh_shape)
        if len(ici_mesh_shape) != len(dcn_mesh_shape):
            raise AssertionError(f"ici_mesh_shape {tuple(ici_mesh_shape)} and dcn_mesh_shape {tuple(dcn_mesh_shape)} "
                                 "differ in length")
        if int(np.prod(dcn_mesh_shape)) > 1:
            raise ValueError("Invalid dcn_mesh_shape for single slice mesh")
        count = len(backend.jax_devices())
        if int(np.prod(ici_mesh_shape)) != count:
            raise ValueError(f"Number of devices {count} must equal the product of mesh_shape {tuple(ici_mesh_shape)}")
        self.ici_mesh_shape = tuple(ici_mesh_shape)
        self.dcn_mesh_shape = tuple(dcn_mesh_shape)
        mesh_shape = tuple(i * d for i, d in zip(ici_mesh_shape, dcn_mesh_shape))
        super().__init__(np.arange(count), mesh_shape, axis_names)


_global_mesh: Mesh | None = None


def set_global_mesh(mesh: Mesh) -> None:
    """Keeps `mesh` as the process's mesh (PyTorch/XLA's `xs.set_global_mesh`)."""
    global _global_mesh
    _global_mesh = mesh


def get_global_mesh() -> Mesh | None:
    """The mesh given to `set_global_mesh`, or None."""
    return _global_mesh


def jax_mesh_of(key: tuple):
    """The jax `Mesh` for a `Mesh.key()`."""
    import jax

    ids, shape, names = key
    devices = backend.jax_devices()
    return jax.sharding.Mesh(np.array([devices[i] for i in ids]).reshape(shape), names)


class OpSharding:
    """A mesh and a partition spec, as `Mesh.get_op_sharding` gives them (PyTorch/XLA's `_XLAC.OpSharding`).

    Attributes:
      mesh: the mesh.
      partition_spec: per dimension, the mesh axis (number or name, or a tuple of them) or None.
    """

    def __init__(self, mesh: Mesh, partition_spec: tuple) -> None:
        self.mesh = mesh
        self.partition_spec = partition_spec

    def __eq__(self, other) -> bool:
        return (isinstance(other, OpSharding) and other.mesh.key() == self.mesh.key()
                and other.partition_spec == self.partition_spec)

    def __hash__(self) -> int:
        return hash((self.mesh.key(), self.partition_spec))

    def __repr__(self) -> str:
        return f"OpSharding(mesh={self.mesh!r}, partition_spec={self.partition_spec})"
