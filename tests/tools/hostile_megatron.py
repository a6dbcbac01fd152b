#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Hostile Megatron inputs made from the fixtures, with the standard library
only (issue 48; tests/megatron-hostile.sh).

The pickles are loaded inert (every global a stand-in class, storages kept as
their persistent ids) and written back with the same globals, so only what a
case changes differs from the real save.

  hostile_megatron.py args SRC DST NAME=VALUE...
      SRC's data.pkl (a torch zip) with args members set: VALUE is a Python
      literal (inf and nan allowed), or bigstr:N (a string of N bytes)
  hostile_megatron.py key SRC DST KEY
      a model entry KEY (a copy of the first tensor) added
  hostile_megatron.py keys SRC DST N
      N model entries extra.N (one element each of one storage) added
  hostile_megatron.py unstack SRC DST LAYERS [EXPERTS]
      the DCP .metadata SRC with one stacked key of LAYERS (x EXPERTS) empty
      slices first
"""
import io
import math
import pickle
import sys
import zipfile

_classes = {}


class Obj:
    """An instance of a global from the pickle: its arguments, state, items."""

    def __init__(self, *args):
        self._args = args
        self._state = None
        self._items = []
        self._new = False

    @classmethod
    def _newobj(cls, *args):
        return cls.__new__(cls, *args)

    def __setstate__(self, st):
        self._state = st

    def __setitem__(self, k, v):
        self._items.append((k, v))

    def __reduce__(self):
        items = iter(self._items) if self._items else None
        if self._new:
            return (_newobj, (type(self),) + self._args, self._state, None, items)
        return (type(self), self._args, self._state, None, items)


def _newobj(cls, *args):
    return cls._newobj(*args)


def _new(cls, *args, **kw):
    o = object.__new__(cls)
    o._args, o._state, o._items, o._new = args, None, [], True
    return o


def global_class(module, name):
    key = (module, name)
    if key not in _classes:
        c = type(name, (Obj,), {"_gmod": module, "_gname": name})
        c.__new__ = _new
        _classes[key] = c
    return _classes[key]


class PID:
    def __init__(self, pid):
        self.pid = pid


class Loader(pickle.Unpickler):
    def find_class(self, module, name):
        return global_class(module, name)

    def persistent_load(self, pid):
        return PID(pid)


class Saver(pickle._Pickler):
    def persistent_id(self, obj):
        return obj.pid if isinstance(obj, PID) else None

    def save_global(self, obj, name=None):
        if obj is _newobj:
            raise AssertionError("unreachable")
        mod = getattr(obj, "_gmod", None)
        if mod is None:
            return super().save_global(obj, name)
        self.write(pickle.GLOBAL + f"{mod}\n{obj._gname}\n".encode())
        self.memoize(obj)

    def save_reduce(self, func, args, state=None, listitems=None, dictitems=None,
                    state_setter=None, obj=None):
        if func is _newobj:
            cls, args = args[0], args[1:]
            self.save(cls)
            self.save(args)
            self.write(pickle.NEWOBJ)
            if obj is not None:
                self.memoize(obj)
            if dictitems is not None:
                self._batch_setitems(dictitems)
            if state is not None:
                self.save(state)
                self.write(pickle.BUILD)
            return
        super().save_reduce(func, args, state, listitems, dictitems, state_setter, obj=obj)


def load(data):
    return Loader(io.BytesIO(data)).load()


def dump(root):
    out = io.BytesIO()
    Saver(out, protocol=2).dump(root)
    return out.getvalue()


def value(text):
    if text.startswith("bigstr:"):
        return "x" * int(text[7:])
    if text in ("inf", "-inf", "nan"):
        return float(text)
    return eval(text, {"__builtins__": {}}, {"inf": math.inf, "nan": math.nan})


def edit_zip(src, dst, edit):
    zin = zipfile.ZipFile(src)
    names = zin.namelist()
    pkl = next(n for n in names if n.endswith("/data.pkl"))
    root = load(zin.read(pkl))
    edit(root)
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for n in names:
            zout.writestr(n, dump(root) if n == pkl else zin.read(n))


def model_of(root):
    return root["model"] if isinstance(root["model"], dict) else root["model"]


def set_model(model, key, val):
    if isinstance(model, dict):
        model[key] = val
    else:
        model._items.append((key, val))


def first_tensor(model):
    items = model.items() if isinstance(model, dict) else model._items
    return next(v for k, v in items if type(v).__name__ == "_rebuild_tensor_v2")


def main():
    cmd, src, dst = sys.argv[1:4]
    rest = sys.argv[4:]
    if cmd == "args":
        def edit(root):
            st = root["args"]._state
            for e in rest:
                name, v = e.split("=", 1)
                st[name] = value(v)
        edit_zip(src, dst, edit)
    elif cmd == "key":
        def edit(root):
            model = model_of(root)
            set_model(model, rest[0], first_tensor(model))
        edit_zip(src, dst, edit)
    elif cmd == "keys":
        def edit(root):
            model = model_of(root)
            t = first_tensor(model)
            c = type(t)
            for i in range(int(rest[0])):
                # _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks)
                a = t._args
                set_model(model, f"extra.{i}", c(a[0], i % 64, (1,), (1,), False, a[5]))
        edit_zip(src, dst, edit)
    elif cmd == "unstack":
        with open(src, "rb") as f:
            meta = load(f.read())
        st = meta._state if isinstance(meta._state, dict) else meta._state[1]
        sdm = st["state_dict_metadata"]
        items = list(sdm.items())
        tkey, tmd = next((k, v) for k, v in items if type(v).__name__ == "TensorStorageMetadata")
        md = tmd._state if isinstance(tmd._state, dict) else tmd._state[1]
        size_cls = type(md["size"])
        dims = [int(rest[0])] + ([int(rest[1])] if len(rest) > 1 else []) + [0]
        new = type(tmd)._newobj(*tmd._args)
        new._state = dict(md)
        new._state["size"] = size_cls(tuple(dims))
        chunk = md["chunks"][0]
        cst = dict(chunk._state if isinstance(chunk._state, dict) else chunk._state[1])
        c2 = type(chunk)._newobj(*chunk._args)
        cst["offsets"] = size_cls(tuple(0 for _ in dims))
        cst["sizes"] = size_cls(tuple(dims))
        c2._state = cst
        new._state["chunks"] = [c2]
        name = "decoder.layers." + ("mlp.experts.experts.hostile.weight" if len(rest) > 1
                                    else "hostile.weight")
        sdm.clear()
        sdm[name] = new
        for k, v in items:
            sdm[k] = v
        with open(dst, "wb") as f:
            f.write(dump(meta))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
