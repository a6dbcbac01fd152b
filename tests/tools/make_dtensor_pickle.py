# SPDX-License-Identifier: Apache-2.0
"""make_dtensor_pickle.py OUT: write tests/data/pickles/dtensor_old.pkl.

A state dict of two DTensors pickled as torch <= 2.8 lays them out (the
module paths torch.distributed._tensor.api / ._device_mesh, a DeviceMesh
holding its `mesh` tensor, a DTensor state that is a plain dict), made with
stand-in classes registered under torch's names, so no torch is needed:

  "w": global (6, 4), mesh (2, 2) at coordinate (1, 0), placements
       (Replicate(), _StridedShard(dim=0, split_factor=2)), local (3, 4)
  "b": global (5,), mesh (2, 2) at coordinate (1, 0), placements
       (Shard(0) pickled with its dim as an argument, Replicate()), local (2,)

Read by tests/unit/t_pickle.c (gfs_pv_read_dtensor()).
"""
import collections
import copyreg
import pickle
import sys
import types


def module(name):
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        n = ".".join(parts[:i])
        if n not in sys.modules:
            sys.modules[n] = types.ModuleType(n)
        if i > 1:
            setattr(sys.modules[".".join(parts[:i - 1])], parts[i - 1], sys.modules[n])
    return sys.modules[name]


class Inst:
    """An instance pickled as NEWOBJ(cls, *args) then BUILD(state)."""

    def __init__(self, args=(), state=None):
        self._args, self._state = tuple(args), state

    def __reduce_ex__(self, proto):
        return (copyreg.__newobj__, (type(self),) + self._args, self._state)


def cls(mod, name, base=Inst):
    c = type(name, (base,), {})
    c.__module__ = mod
    c.__qualname__ = name
    setattr(module(mod), name, c)
    return c


def func(mod, name):
    def f(*a):
        return a
    f.__module__ = mod
    f.__qualname__ = f.__name__ = name
    setattr(module(mod), name, f)
    return f


FloatStorage = cls("torch", "FloatStorage")
LongStorage = cls("torch", "LongStorage")
float32 = cls("torch", "float32")
rebuild_v2 = func("torch._utils", "_rebuild_tensor_v2")
rebuild_wrapper = func("torch._utils", "_rebuild_wrapper_subclass")
from_type = func("torch._tensor", "_rebuild_from_type_v2")
DTensor = cls("torch.distributed._tensor.api", "DTensor")
DTensorSpec = cls("torch.distributed._tensor.placement_types", "DTensorSpec")
TensorMeta = cls("torch.distributed._tensor.placement_types", "TensorMeta")
Shard = cls("torch.distributed._tensor.placement_types", "Shard")
Replicate = cls("torch.distributed._tensor.placement_types", "Replicate")
Strided = cls("torch.distributed._tensor.placement_types", "_StridedShard")
DeviceMesh = cls("torch.distributed._device_mesh", "DeviceMesh")


class Storage:
    def __init__(self, c, key, numel):
        self.c, self.key, self.numel = c, key, numel


class Tensor:
    def __init__(self, storage, size, stride):
        self.storage, self.size, self.stride = storage, size, stride

    def __reduce__(self):
        return (rebuild_v2, (self.storage, 0, self.size, self.stride, False, collections.OrderedDict()))


def Obj(c, args=(), state=None):
    return c(args, state)


class Wrapper:
    def __init__(self, dtype, size, stride, state):
        self.a = (DTensor, dtype, size, stride, 0, None, None, False)
        self.state = state

    def __reduce__(self):
        return (from_type, (rebuild_wrapper, DTensor, self.a, self.state))


class P(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", obj.c, obj.key, "cpu", obj.numel)
        return None


def main():
    mesh = Obj(DeviceMesh, state={
        "device_type": "cpu",
        "mesh": Tensor(Storage(LongStorage, "9", 4), (2, 2), (2, 1)),
        "mesh_dim_names": ("ddp", "fsdp"),
        "_coordinate_on_dim": [1, 0],
    })
    w = Wrapper(float32, (6, 4), (4, 1), {
        "_local_tensor": Tensor(Storage(FloatStorage, "0", 12), (3, 4), (4, 1)),
        "_spec": Obj(DTensorSpec, state={
            "mesh": mesh,
            "placements": (Obj(Replicate), Obj(Strided, state={"dim": 0, "split_factor": 2})),
            "tensor_meta": Obj(TensorMeta, ((6, 4), (4, 1), float32)),
        }),
    })
    b = Wrapper(float32, (5,), (1,), {
        "_local_tensor": Tensor(Storage(FloatStorage, "1", 2), (2,), (1,)),
        "_spec": Obj(DTensorSpec, state={
            "mesh": mesh,
            "placements": (Obj(Shard, (0,)), Obj(Replicate)),
            "tensor_meta": None,
        }),
    })
    with open(sys.argv[1], "wb") as f:
        P(f, protocol=2).dump(collections.OrderedDict([("w", w), ("b", b)]))


if __name__ == "__main__":
    main()
