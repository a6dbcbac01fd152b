# SPDX-License-Identifier: Apache-2.0
"""Tests of python/gatherfs_save.py without DeepSpeed (run with /usr/bin/python3).

  zero3_saver_test.py SAVER unit
      the saver's pure parts on real torch tensors and modules: partition
      arithmetic, state-dict planning (tied names, buffers), exact comparison,
      the manifest text.
  zero3_saver_test.py SAVER save OUT W [--tag T] [--fail-rank R] [--seed S]
                      [--truth PATH] [--overwrite] [--stop-rank R] [--last-rank R]
                      [--refused] [--bad-args]
      W real processes (torch.distributed, gloo) each partition a small model
      by DeepSpeed's arithmetic (ceil(numel / W) elements per rank, NaN
      padding) onto plain attributes (ds_id, ds_tensor, ds_numel, ds_shape,
      ds_process_group), leave stale full copies in p.data for some params
      and empty p.data for the others, and call save_zero3(model, OUT).
      Each rank checks its result (stale list, nothing written back).  Rank 0
      writes OUT.truth.pt, the model's state_dict as partitioned.  With
      --fail-rank R, rank R holds a param with no partition, so its save
      raises: it must leave no manifest.  --seed: another model (default 7);
      --truth: where rank 0 writes the truth; --overwrite: save_zero3(...,
      overwrite=True).  --stop-rank R: rank R runs the saver's own pieces
      (argument checks, prepare_dir(), write_data()) and stops before
      write_manifest(), as a rank killed while writing would.  --last-rank
      R: rank R saves after every other rank has saved.  --refused:
      every rank's save must be refused (a complete save of the tag) and
      change nothing.  --bad-args: every rank calls save_zero3 with each of a
      list of bad arguments; each must raise SaveError and change nothing
      under OUT (names, sizes, mtimes).  LOCAL_RANK is 0 on every rank
      (the saver must use the rank in the group).  The end-to-end check with
      real DeepSpeed is the committed fixtures of tests/data/lomo/saves/.
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn


def load_saver(path):
    spec = importlib.util.spec_from_file_location("gatherfs_save", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Small(nn.Module):
    def __init__(self, seed=7):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(11, 6)
        self.lin = nn.Linear(6, 5)
        self.one = nn.Parameter(torch.tensor([0.5]))
        self.frozen = nn.Parameter(torch.randn(7), requires_grad=False)
        self.head = nn.Linear(6, 11, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("ids", torch.arange(9, dtype=torch.int64))
        self.register_buffer("scratch", torch.ones(3), persistent=False)
        self.register_buffer("bfbuf", torch.randn(4).to(torch.bfloat16))


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}", file=sys.stderr)
        sys.exit(1)


def unit(g):
    for numel in (0, 1, 2, 7, 13, 64000, 2368):
        for w in (1, 2, 3, 4, 5, 8):
            ps = g.expected_partition_numel(numel, w)
            spans = [g.partition_span(numel, ps, r) for r in range(w)]
            got = [i for s, v in spans for i in range(s, s + v)]
            check(got == list(range(numel)), f"spans of {numel} over {w}: {spans}")
            check(ps * w - numel < w or numel == 0, f"padding of {numel} over {w}")
    check(g.partition_span(1, 1, 2) == (2, 0), "numel 1, rank 2: nothing valid")
    check(g.partition_span(13, 5, 2) == (10, 3), "numel 13 over 3, rank 2")

    m = Small()
    entries = g.plan_entries(m.state_dict(keep_vars=True))
    kinds = [(k, n) for k, n, _ in entries]
    check(kinds == [("full", "one"), ("full", "frozen"), ("full", "ids"), ("full", "bfbuf"),
                    ("full", "embed.weight"), ("full", "lin.weight"), ("full", "lin.bias"),
                    ("alias", "head.weight")], f"plan of a plain module: {kinds}")
    check(entries[-1][2] == "embed.weight", "alias target")
    m.lin.weight.ds_id, m.lin.weight.ds_tensor = 3, torch.zeros(15)
    check([k for k, n, _ in g.plan_entries(m.state_dict(keep_vars=True)) if n == "lin.weight"] == ["part"],
          "a param with ds_id and ds_tensor is partitioned")
    try:
        g.plan_entries({"x": 3})
        check(False, "a non-tensor entry must be refused")
    except g.SaveError as e:
        check("not a tensor" in str(e), str(e))

    a = torch.tensor([1.0, float("nan"), -0.0])
    check(g._diff(a, a.clone()) == (False, 0.0), "NaN equals NaN bitwise")
    check(g._diff(a, torch.tensor([1.0, float("nan"), 0.0]))[0], "-0.0 differs from 0.0")
    check(g._diff(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5])) == (True, 0.5), "max abs diff")
    check(g._diff(torch.tensor([1, 2]), torch.tensor([1, 3])) == (True, None), "integer difference")
    check(g._diff(torch.tensor([1.0]), torch.tensor([float("nan")])) == (True, None), "NaN: no difference value")
    check(g._diff(torch.tensor([1.0]), torch.tensor([float("inf")])) == (True, None), "inf: no difference value")
    b = torch.tensor([1.5, 2.25], dtype=torch.bfloat16)
    check(bytes(g._flat_bytes(b)) == b"\xc0\x3f\x10\x40", "bf16 bytes little-endian")
    check(g.dtype_name(torch.bfloat16) == "bfloat16", "dtype name")
    man = {"gatherfs_zero3": 1, "tag": "t\"q", "world_size": 2, "rank": 1, "data": {"path": "p", "size": 0},
           "tensors": [{"name": "a", "alias_of": "b"}], "stale": [], "torch_version": "x"}
    check(json.loads(g._manifest_text(man)) == man, "manifest text round trip")
    print("ok: saver unit tests")


def partition(model, rank, ws, group, fail):
    """DeepSpeed's partition layout on plain attributes.  Returns the truth
    state dict and the names whose p.data is left stale."""
    truth, stale = {}, []
    memo = {}
    for i, (name, p) in enumerate(model.named_parameters()):
        flat = p.detach().reshape(-1).clone()
        ps = (flat.numel() + ws - 1) // ws
        padded = torch.full((ps * ws,), float("nan"), dtype=p.dtype)
        padded[:flat.numel()] = flat
        p.ds_id, p.ds_numel, p.ds_shape, p.ds_process_group = i, flat.numel(), p.shape, group
        p.ds_tensor = padded[rank * ps:(rank + 1) * ps].clone()
        p.ds_tensor.ds_numel = ps
        if fail and name == "lin.bias":
            p.ds_tensor = None
        memo[id(p)] = flat.view(p.shape).clone()
        if i % 2 == 0:  # a full copy that training left behind: stale by +1
            p.data = p.data + 1
            stale.append(name)
        else:  # released: only the partition exists
            p.data = torch.empty(0, dtype=p.dtype)
    for k, v in model.state_dict(keep_vars=True).items():
        truth[k] = memo.get(id(v), v.detach().clone())  # tied names: one tensor
    return truth, stale


def snapshot(out):
    """(path, size, mtime) of everything under out."""
    got = []
    for d, dirs, files in os.walk(out):
        for f in dirs + files:
            st = os.stat(os.path.join(d, f))
            got.append((os.path.join(d, f), st.st_size, st.st_mtime_ns))
    return sorted(got)


def bad_args(g, model, out, rank):
    """Every bad argument is refused before anything under out changes."""
    notadir = f"{out}.notadir{rank}"
    open(notadir, "w").close()
    cases = [dict(tag=5, config=123), dict(tag=1.5), dict(tag=True), dict(tag="a/b"), dict(tag=".hidden"),
             dict(tag="x\ny"), dict(tag="step5", config="/nonexistent/config.json"),
             dict(tag="step5", config={"x": float("nan")}), dict(tag="step5", config=[1]),
             dict(tag="step5", overwrite="yes"), dict(tag="step5", group=object()),
             dict(tag="step5", save_dir=notadir), dict(tag="step5", save_dir=""),
             dict(tag="step5", save_dir=3), dict(tag="step5", module=object())]
    before = snapshot(out)
    for c in cases:
        args = dict(module=model, save_dir=out)
        args.update(c)
        try:
            g.save_zero3(args.pop("module"), args.pop("save_dir"), **args)
            check(False, f"rank {rank}: {c} was not refused")
        except g.SaveError as e:
            check(snapshot(out) == before, f"rank {rank}: {c} changed {out}")
            if rank == 0:
                print(f"ok: refused {c}: {e}")
    os.unlink(notadir)


def stop_before_manifest(g, model, out, tag, rank, ws, group, overwrite):
    """The saver's own pieces, up to the manifest excluded."""
    save_dir, tag, _ = g._check_args(model, out, tag, None)
    entries, r, w = g._rank_of(model, group)
    check((r, w) == (rank, ws), "rank")
    os.makedirs(save_dir, exist_ok=True)
    d, _ = g.prepare_dir(save_dir, tag, overwrite)
    g.write_data(d, entries, rank, ws)
    print(f"ok: rank {rank} stopped before its manifest")


def worker(g, out, rank, ws, tag, fail_rank, store, opts):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=ws)
    group = dist.new_group(list(range(ws)))
    model = Small(opts["seed"])
    truth, stale = partition(model, rank, ws, group, rank == fail_rank)
    if rank == 0 and not opts["bad_args"] and not opts["refused"]:
        torch.save(truth, opts["truth"] or out + ".truth.pt")
    if opts["bad_args"]:
        bad_args(g, model, out, rank)
        return
    if rank == opts["stop_rank"]:
        stop_before_manifest(g, model, out, tag, rank, ws, group, opts["overwrite"])
        return
    if opts["refused"]:
        before = snapshot(out)
        try:
            g.save_zero3(model, out, tag=tag, overwrite=opts["overwrite"])
            check(False, f"rank {rank}: a save over a complete save was not refused")
        except g.SaveError as e:
            check("holds a complete save" in str(e), str(e))
            check(snapshot(out) == before, f"rank {rank}: a refused save changed {out}")
            print(f"ok: rank {rank} refused: {e}")
        return
    before = {n: (p.data.clone(), None if p.ds_tensor is None else p.ds_tensor.clone())
              for n, p in model.named_parameters()}
    # --last-rank R: rank R saves once every other rank has (a retry of a
    # tag whose earlier save R did not finish: a rank that finished that
    # one and starts late would find the others' new manifests beside its
    # own old one, a complete set, and refuse: the case docs/zero3-save.md
    # says no collective-free protocol can tell)
    last = opts.get("last_rank", -1)
    if last >= 0 and rank == last:
        dist.barrier(group)
    try:
        res = g.save_zero3(model, out, tag=tag, config={"model_type": "small"} if rank == 0 else None,
                           overwrite=opts["overwrite"])
    except g.SaveError as e:
        if last >= 0 and rank != last:
            dist.barrier(group)
        check(rank == fail_rank, f"rank {rank}: unexpected {e}")
        d = os.path.join(out, g.tag_dir(tag))
        check(not os.path.exists(os.path.join(d, f"zero3-rank-{rank}.json")), "a failed rank left a manifest")
        check(not os.path.exists(d) or not [f for f in os.listdir(d) if f.startswith(f"zero3-rank-{rank}.")
                                            and f.endswith(".tmp")],
              "a failed rank left a temporary file")
        print(f"ok: rank {rank} failed as asked: {e}")
        return
    if last >= 0 and rank != last:
        dist.barrier(group)
    check(rank != fail_rank, f"rank {rank} should have failed")
    check(res["rank"] == rank and res["world_size"] == ws, f"rank/world {res}")
    for n, p in model.named_parameters():
        d, t = before[n]
        check(torch.equal(g._bits(p.data), g._bits(d)), f"{n}: p.data changed")
        check(torch.equal(g._bits(p.ds_tensor), g._bits(t)), f"{n}: ds_tensor changed")
    # a stale copy is reported by each rank that holds some of the param
    want = sorted(n for n in stale
                  if g.partition_span(model.get_parameter(n).ds_numel,
                                      model.get_parameter(n).ds_tensor.ds_numel, rank)[1])
    got = sorted(s["name"] for s in res["stale"])
    check(got == want and all(s["copy"] == "data" for s in res["stale"]), f"rank {rank}: stale {got}, want {want}")
    print(f"ok: rank {rank} saved, stale {got}")


def save(g, saver, out, ws, tag, fail_rank, opts):
    store = tempfile.mktemp(prefix="gfs-store-")
    env = dict(os.environ, LOCAL_RANK="0")
    procs = [subprocess.Popen([sys.executable, __file__, saver, "worker", out, str(r), str(ws), tag,
                               str(fail_rank), store, json.dumps(opts)], env=env) for r in range(ws)]
    rcs = [p.wait(timeout=120) for p in procs]
    if os.path.exists(store):
        os.unlink(store)
    check(rcs == [0] * ws, f"workers exited {rcs}")


def main():
    saver, cmd = sys.argv[1], sys.argv[2]
    g = load_saver(saver)
    if cmd == "unit":
        unit(g)
    elif cmd == "save":
        args = sys.argv[3:]
        out, ws = args[0], int(args[1])
        tag = args[args.index("--tag") + 1] if "--tag" in args else ""
        fail_rank = int(args[args.index("--fail-rank") + 1]) if "--fail-rank" in args else -1
        opts = {"seed": int(args[args.index("--seed") + 1]) if "--seed" in args else 7,
                "truth": args[args.index("--truth") + 1] if "--truth" in args else None,
                "stop_rank": int(args[args.index("--stop-rank") + 1]) if "--stop-rank" in args else -1,
                "last_rank": int(args[args.index("--last-rank") + 1]) if "--last-rank" in args else -1,
                "overwrite": "--overwrite" in args, "refused": "--refused" in args,
                "bad_args": "--bad-args" in args}
        save(g, saver, out, ws, tag, fail_rank, opts)
    elif cmd == "worker":
        out, rank, ws, tag, fail_rank, store, opts = sys.argv[3:10]
        worker(g, out, int(rank), int(ws), tag, int(fail_rank), store, json.loads(opts))
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
