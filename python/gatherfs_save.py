# SPDX-License-Identifier: Apache-2.0
"""gatherfs_save: save a DeepSpeed ZeRO-3 model without gathering it.

Call ``save_zero3(engine.module, save_dir, tag=step)`` on every rank of the
data-parallel group, at a step boundary.  Every argument is checked before
anything is written.  Each rank writes only the partitions it owns
(``p.ds_tensor[:valid]``) to ``save_dir/TAG/zero3-rank-R.bin`` and then its
manifest ``save_dir/TAG/zero3-rank-R.json`` (with the CRC-32 of each
partition); rank 0 also writes the persistent buffers (and ``config.json``
when ``config`` is given).  There is no collective, no gathered tensor, and
memory stays O(one partition).  Once every rank has returned, ``gatherfs
save_dir MNT`` serves the whole model of the newest complete save
(``pytorch_model.bin``, ``model.safetensors``...).  A save never writes into
another tag's directory, and a complete save of its own tag is replaced only
with ``overwrite=True``.  The format and the protocol are described in
docs/zero3-save.md.

The partitions are the only authoritative copy of a ZeRO-3 parameter under
an optimizer-free engine (LOMO): the full copies in ``p.data`` and the hpZ
``ds_secondary_tensor`` may be stale.  They are never saved and nothing is
ever written back; they are compared, read-only, with the partitions, and
the parameters whose live copy differs are listed in the manifest
("stale") and returned.

Standard library and torch only: importing this module does not need
DeepSpeed.
"""

import ctypes
import json
import math
import numbers
import os
import sys
import zlib

import torch

FORMAT_VERSION = 1
ALIGN = 64
MANIFEST = "zero3-rank-{}.json"
DATA = "zero3-rank-{}.bin"
UNTAGGED = "untagged"  # the directory of a save with no tag

_DTYPES = {
    torch.float64: "float64", torch.float32: "float32", torch.float16: "float16",
    torch.bfloat16: "bfloat16", torch.complex128: "complex128", torch.complex64: "complex64",
    torch.int64: "int64", torch.int32: "int32", torch.int16: "int16", torch.int8: "int8",
    torch.uint8: "uint8", torch.bool: "bool",
}

__all__ = ["save_zero3", "partition_span", "plan_entries", "tag_dir", "is_complete"]


class SaveError(RuntimeError):
    """A model or process group that save_zero3 cannot save correctly."""


def dtype_name(dtype):
    """The layout name of a torch dtype ("float32", "bfloat16"...)."""
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise SaveError(f"dtype {dtype} cannot be saved") from None


def partition_span(numel, partition_numel, rank):
    """(start, valid): ZeRO-3 rank `rank` holds elements [start, start + valid)
    of the flattened param, the first `valid` elements of its partition; the
    rest of the partition is padding."""
    start = partition_numel * rank
    return start, min(partition_numel, max(0, numel - start))


def expected_partition_numel(numel, world_size):
    """ceil(numel / world_size): the partition size DeepSpeed gives every rank."""
    return (numel + world_size - 1) // world_size


def _is_zero3(t):
    return hasattr(t, "ds_id") and hasattr(t, "ds_tensor")


def plan_entries(state):
    """The entries of a state dict (``module.state_dict(keep_vars=True)``), in
    order: ("part", name, param) for a ZeRO-3 param, ("full", name, tensor) for
    any other tensor (a buffer or an unpartitioned param), ("alias", name,
    target) for a later key holding an object already seen (a tied weight)."""
    seen, out = {}, []
    for name, t in state.items():
        if not isinstance(t, torch.Tensor):
            raise SaveError(f"state_dict entry {name} is a {type(t).__name__}, not a tensor")
        if id(t) in seen:
            out.append(("alias", name, seen[id(t)]))
            continue
        seen[id(t)] = name
        out.append(("part" if _is_zero3(t) else "full", name, t))
    return out


def _group_rank(param, group):
    """(rank, world size) of this process in the param's partition group."""
    import torch.distributed as dist
    g = group if group is not None else getattr(param, "ds_process_group", None)
    if not dist.is_available() or not dist.is_initialized():
        raise SaveError("torch.distributed is not initialized: call save_zero3 on every rank of a ZeRO-3 engine")
    try:
        rank, ws = dist.get_rank(g), dist.get_world_size(g)
    except (AttributeError, RuntimeError, TypeError, ValueError) as e:
        raise SaveError(f"group {group!r} is not a process group: {e}") from None
    if rank < 0 or ws < 1:
        raise SaveError("this process is not a member of the partition group")
    return rank, ws


def _flat_bytes(t):
    """A read-only byte view of a contiguous CPU tensor (no copy)."""
    assert t.device.type == "cpu" and t.is_contiguous()
    n = t.numel() * t.element_size()
    if n == 0:
        return b""
    return memoryview((ctypes.c_char * n).from_address(t.data_ptr())).cast("B")


def _write_tensor(f, pos, t):
    """Write tensor t (CPU copy made if needed: O(t)) at the next aligned
    offset after pos; return (offset, length, CRC-32 of those length bytes,
    new pos)."""
    pad = (-pos) % ALIGN
    if pad:
        f.write(b"\0" * pad)
        pos += pad
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    b = _flat_bytes(t)
    f.write(b)
    return pos, len(b), zlib.crc32(b), pos + len(b)


def _bits(t):
    """The bytes of t as a uint8 tensor, for exact comparison (NaN == NaN,
    -0.0 != +0.0)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def _diff(a, b):
    """(differs, max abs difference) of two equal-length 1-D tensors; the
    difference is None unless both are floating point and it is finite (the
    manifest is strict JSON: no NaN or Infinity)."""
    if a.dtype != b.dtype:
        b = b.to(a.dtype)
    if torch.equal(_bits(a), _bits(b)):
        return False, 0.0
    if a.is_floating_point():
        mx = float((a.double() - b.double()).abs().nan_to_num(nan=math.inf, posinf=math.inf).max())
        return True, mx if math.isfinite(mx) else None
    return True, None


def _staleness(name, p, start, valid, part):
    """Compare, read-only, the live full copies this rank holds of param p
    with its own partition elements [start, start + valid)."""
    out = []
    if valid == 0:
        return out
    data = p.data
    if data.numel() == p.ds_numel and p.ds_numel > 0:
        live = data.detach().reshape(-1)[start:start + valid].cpu()
        differs, mx = _diff(part, live)
        if differs:
            out.append({"name": name, "copy": "data", "max_abs_diff": mx})
    sec = getattr(p, "ds_secondary_tensor", None)
    sgroup = getattr(p, "ds_zero_param_process_group", None)
    if sec is not None and sgroup is not None and not hasattr(sec, "ds_quant_scale"):
        import torch.distributed as dist
        sps = sec.numel()
        s0 = sps * dist.get_rank(sgroup)
        lo, hi = max(start, s0), min(start + valid, s0 + sps, p.ds_numel)
        if lo < hi:  # the part of our partition the secondary copy also holds
            live = sec.detach()[lo - s0:hi - s0].cpu()
            differs, mx = _diff(part[lo - start:hi - start], live)
            if differs:
                out.append({"name": name, "copy": "secondary", "max_abs_diff": mx})
    return out


def _config_json(config):
    """The text of config.json for config (a dict, a transformers config or
    the path of a config.json), checked to be a JSON object."""
    try:
        if isinstance(config, dict):
            text = json.dumps(config, indent=2, sort_keys=True, allow_nan=False) + "\n"
        elif hasattr(config, "to_json_string"):  # transformers.PretrainedConfig
            text = config.to_json_string()
        elif isinstance(config, (str, os.PathLike)):
            with open(config) as f:
                text = f.read()
        else:
            raise SaveError(f"config is of type {type(config).__name__}: it must be a dict, a transformers "
                            "config or the path of a config.json")
        if not isinstance(text, str) or not isinstance(json.loads(text, parse_constant=_refuse_constant), dict):
            raise SaveError("config is not a JSON object")
    except (OSError, TypeError, ValueError) as e:
        raise SaveError(f"config: {e}") from None
    return text


def _tmp(path):
    """A temporary name next to path, unique to this process."""
    return f"{path}.{os.getpid()}.tmp"


def _atomic_write_text(path, text):
    tmp = _tmp(path)
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _manifest_text(manifest):
    """The manifest as JSON, one tensor or stale entry per line."""
    head = {k: v for k, v in manifest.items() if k not in ("tensors", "stale")}
    lines = ["{"] + [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    for key in ("tensors", "stale"):
        items = [f"  {json.dumps(x)}" for x in manifest[key]]
        lines.append(f' "{key}": [' + ("\n" + ",\n".join(items) + "\n ]" if items else "]")
                     + ("," if key == "tensors" else ""))
    text = "\n".join(lines) + "\n}\n"
    json.loads(text, parse_constant=_refuse_constant)
    return text


def _refuse_constant(name):
    raise SaveError(f"manifest would hold {name}, which is not JSON")


def _partition(name, t, rank, ws):
    """(partition, elements valid on this rank) of ZeRO-3 param t, checked."""
    part = t.ds_tensor
    if part is None or hasattr(part, "ds_quant_scale"):
        raise SaveError(f"rank {rank}: param {name} has no plain partition (quantized or missing ds_tensor)")
    status = getattr(part, "status", None)
    if status is not None and getattr(status, "name", "") == "NOT_AVAILABLE":
        raise SaveError(f"rank {rank}: param {name}'s partition is swapped out (NVMe offload): not supported")
    numel = int(t.ds_numel)
    ps = int(part.ds_numel) if hasattr(part, "ds_numel") else part.numel()
    if ps != expected_partition_numel(numel, ws) or part.numel() < ps:
        raise SaveError(f"rank {rank}: param {name}: partition of {part.numel()} elements "
                        f"(ds_numel {ps}) for {numel} elements over {ws} ranks")
    dtype_name(part.dtype)
    return part, partition_span(numel, ps, rank)[1]


def check_entries(entries, rank, ws):
    """Raise SaveError for any entry _write_data() would refuse, writing nothing."""
    for kind, name, t in entries:
        if kind == "full":
            dtype_name(t.dtype)
        elif kind == "part":
            _partition(name, t, rank, ws)


def _write_data(f, entries, rank, ws):
    """Write rank `rank`'s bytes of every entry to f: the valid part of each
    ZeRO-3 partition; on rank 0 also the unpartitioned tensors.  Returns the
    manifest's tensor table, the stale live copies found, and the size."""
    tensors, stale, pos = [], [], 0
    for kind, name, t in entries:
        if kind == "alias":
            tensors.append({"name": name, "alias_of": t})
            continue
        ent = {"name": name, "dtype": None, "shape": None}
        if kind == "full":
            ent.update(dtype=dtype_name(t.dtype), shape=list(t.shape), full=True)
            if rank == 0:
                ent["offset"], ent["length"], ent["crc32"], pos = _write_tensor(f, pos, t)
            tensors.append(ent)
            continue
        part, valid = _partition(name, t, rank, ws)
        numel, ps = int(t.ds_numel), expected_partition_numel(int(t.ds_numel), ws)
        start = partition_span(numel, ps, rank)[0]
        mine = part.detach().reshape(-1)[:valid]
        if mine.device.type != "cpu":
            mine = mine.cpu()
        ent.update(dtype=dtype_name(part.dtype), shape=[int(d) for d in t.ds_shape], numel=numel,
                   partition_numel=ps)
        ent["offset"], ent["length"], ent["crc32"], pos = _write_tensor(f, pos, mine)
        tensors.append(ent)
        stale += _staleness(name, t, start, valid, mine)
    return tensors, stale, pos


def _check_tag(tag):
    """The tag as written in the manifests: "" for None, str(tag) for an int."""
    if tag is None:
        return ""
    if isinstance(tag, numbers.Integral) and not isinstance(tag, bool):
        return str(int(tag))
    if not isinstance(tag, str):
        raise SaveError(f"tag is of type {type(tag).__name__}: it must be a string or an integer")
    if any(ord(c) < 0x20 or c == "\x7f" for c in tag):
        raise SaveError(f"tag {tag!r} holds a control character")
    return tag


def _check_dir(save_dir):
    """save_dir as a str path, which is a directory or does not exist yet."""
    if not isinstance(save_dir, (str, os.PathLike)):
        raise SaveError(f"save_dir is of type {type(save_dir).__name__}: it must be a path")
    path = os.fspath(save_dir)
    if not isinstance(path, str) or not path:
        raise SaveError(f"save_dir {save_dir!r} must be a non-empty str path")
    if os.path.exists(path) and not os.path.isdir(path):
        raise SaveError(f"save_dir {path} exists and is not a directory")
    return path


def _check_args(module, save_dir, tag, config):
    """Check every argument before anything is written: (save_dir, tag,
    config.json text or None)."""
    if not callable(getattr(module, "state_dict", None)):
        raise SaveError(f"module is of type {type(module).__name__}, not a torch module (engine.module)")
    path, tag = _check_dir(save_dir), _check_tag(tag)
    _check_tag_name(tag)
    return path, tag, None if config is None else _config_json(config)


def _rank_of(module, group):
    """(entries, rank, world size) of a module's state dict, every entry
    checked as _write_data() will write it."""
    entries = plan_entries(module.state_dict(keep_vars=True))
    parts = [e for e in entries if e[0] == "part"]
    if not parts:
        raise SaveError("the module has no ZeRO-3 parameters (no ds_id): is it engine.module of a ZeRO-3 engine?")
    rank, ws = _group_rank(parts[0][2], group)
    for _, name, p in parts:
        r, w = _group_rank(p, group)
        if (r, w) != (rank, ws):
            raise SaveError(f"rank {rank}: param {name} is partitioned over another group "
                            f"(rank {r} of {w}, not {rank} of {ws}); pass group=")
    check_entries(entries, rank, ws)
    return entries, rank, ws


def tag_dir(tag):
    """The subdirectory of save_dir that holds the save of tag (a str):
    the tag itself, "untagged" for ""."""
    return tag if tag else UNTAGGED


def _check_tag_name(tag):
    """Refuse a tag that cannot name its own subdirectory."""
    name = tag_dir(tag)
    if "/" in name or name in (".", "..") or name.startswith(".") or len(name.encode()) > 200:
        raise SaveError(f"tag {tag!r} cannot name a directory (no '/', no leading '.', at most 200 bytes)")


def _rank_files(d, rank):
    """The names of rank `rank`'s files of the save in directory d."""
    return [DATA.format(rank), MANIFEST.format(rank)] + (["config.json"] if rank == 0 else [])


def is_complete(d):
    """Does directory d hold a complete save: the manifests of ranks
    0..W-1 (W from rank 0's), of the same tag and world size?"""
    try:
        with open(os.path.join(d, MANIFEST.format(0))) as f:
            m0 = json.load(f)
        for r in range(1, int(m0["world_size"])):
            with open(os.path.join(d, MANIFEST.format(r))) as f:
                m = json.load(f)
            if (m.get("tag"), m.get("world_size"), m.get("rank")) != (m0["tag"], m0["world_size"], r):
                return False
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return True


def _fsync_dir(d):
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def prepare_dir(save_dir, tag, overwrite):
    """The directory of tag's save (save_dir/TAG), made; a complete earlier
    save there is refused, or with overwrite moved aside whole to
    save_dir/.TAG.old (by whichever rank comes first).  Returns (directory,
    the directory holding the save moved aside)."""
    d = os.path.join(save_dir, tag_dir(tag))
    old = os.path.join(save_dir, "." + tag_dir(tag) + ".old")
    if is_complete(d):
        if not overwrite:
            raise SaveError(f"{d} holds a complete save: pass overwrite=True, or another tag")
        try:
            os.rename(d, old)
        except OSError:
            if is_complete(d):  # not moved by another rank: a leftover is in the way
                raise SaveError(f"{old}: left by an earlier overwrite that did not finish: "
                                "remove it to overwrite this save") from None
    os.makedirs(d, exist_ok=True)
    _fsync_dir(save_dir)
    return d, old


def write_data(d, entries, rank, ws):
    """Write rank `rank`'s data file into directory d (through a temporary
    file, fsynced, renamed).  An earlier manifest of this rank in d goes
    first, so the rank never looks complete meanwhile.  Returns
    (tensors, stale, size) for write_manifest()."""
    mpath, dpath = os.path.join(d, MANIFEST.format(rank)), os.path.join(d, DATA.format(rank))
    if os.path.exists(mpath):  # of an incomplete earlier save of this tag
        os.unlink(mpath)
    tmp = _tmp(dpath)
    try:
        with open(tmp, "wb") as f:
            tensors, stale, size = _write_data(f, entries, rank, ws)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    os.replace(tmp, dpath)
    return tensors, stale, size


def write_manifest(d, tag, rank, ws, tensors, stale, size):
    """Write rank `rank`'s manifest into d, last (fsynced, renamed, the
    directory fsynced): from then on the rank's part of the save is complete."""
    manifest = {
        "gatherfs_zero3": FORMAT_VERSION,
        "tag": tag,
        "world_size": ws,
        "rank": rank,
        "data": {"path": DATA.format(rank), "size": size},
        "tensors": tensors,
        "stale": stale,
        "torch_version": torch.__version__,
    }
    mpath = os.path.join(d, MANIFEST.format(rank))
    _atomic_write_text(mpath, _manifest_text(manifest))
    _fsync_dir(d)
    return mpath


def _drop_old(old, rank):
    """Delete this rank's files of the save moved aside to old (and old once empty)."""
    for name in _rank_files(old, rank):
        try:
            os.unlink(os.path.join(old, name))
        except FileNotFoundError:
            pass
    try:
        os.rmdir(old)
    except OSError:
        pass  # another rank's files are still there, or it is gone


def save_zero3(module, save_dir, tag=None, group=None, config=None, overwrite=False):
    """Save a ZeRO-3 module's weights rank-locally.  Call on every rank of the
    data-parallel group (``engine.module``), all with the same ``tag`` (e.g.
    the global step: a str or an int; it names the save's directory
    ``save_dir/TAG``, ``save_dir/untagged`` without one).  ``group``: the
    partition group (default: each param's ``ds_process_group``).
    ``config``: a dict, a transformers config or a config.json path, written
    by rank 0 as ``config.json``.  ``overwrite``: replace a complete save of
    the same tag (else it is refused).

    Every argument, and every tensor to save, is checked before anything is
    written (SaveError).  Then (docs/zero3-save.md, "The save protocol")
    prepare_dir(), write_data(), config.json, write_manifest(): rank R
    writes ``zero3-rank-R.bin`` then ``zero3-rank-R.json`` (rank 0 also the
    buffers and other unpartitioned tensors), each through a temporary
    file, fsynced and renamed, so a manifest exists only for a rank whose
    data is complete.  The manifest holds the CRC-32 of every tensor's bytes.
    Reads only the partitions (``p.ds_tensor``), never ``p.data`` or
    ``ds_secondary_tensor`` for saving, and writes nothing back.

    Returns a dict: rank, world_size, tag, dir (of the save), files written,
    and ``stale``: the params whose live gathered copy (``p.data`` or the
    hpZ secondary tensor) differs from the saved partitions on this rank.
    """
    if sys.byteorder != "little":
        raise SaveError("gatherfs files are little-endian; this host is big-endian")
    save_dir, tag, config_text = _check_args(module, save_dir, tag, config)
    if not isinstance(overwrite, bool):
        raise SaveError(f"overwrite is of type {type(overwrite).__name__}: it must be True or False")
    entries, rank, ws = _rank_of(module, group)
    os.makedirs(save_dir, exist_ok=True)
    d, old = prepare_dir(save_dir, tag, overwrite)
    tensors, stale, size = write_data(d, entries, rank, ws)
    files = [os.path.join(d, DATA.format(rank))]
    if rank == 0 and config_text is not None:
        files.append(os.path.join(d, "config.json"))
        _atomic_write_text(files[-1], config_text)
    files.append(write_manifest(d, tag, rank, ws, tensors, stale, size))
    _drop_old(old, rank)
    return {"rank": rank, "world_size": ws, "tag": tag, "dir": d, "files": files, "stale": stale}
