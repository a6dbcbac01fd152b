#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Tests of python/gatherfs_resume.py's restore_param_groups() without DeepSpeed.

    resume_helper_test.py HELPER Z3_DIR Z3_TAG
    resume_helper_test.py HELPER --noop DIR

Z3_DIR is a directory holding a two-group ZeRO-3 universal checkpoint
(latest_universal, Z3_TAG/zero/optimizer_state.pt): a gatherfs mount of
tests/data/universal/z3_ws2_2groups_fp32/checkpoint, or DeepSpeed's own
ds_to_universal output (then pass its tag).  --noop DIR: a mount of a
ZeRO-1/2 checkpoint, where the helper must change nothing.

DeepSpeed is absent here, so the engine is a STAND-IN: ``Engine`` below has
only the attributes restore_param_groups() reads on a real DeepSpeed engine
(``load_universal_checkpoint()``, ``optimizer.param_groups``,
``optimizer.optimizer.param_groups`` and ``optimizer.optimizer.state`` keyed
by the fp32 flat partitions), in the state DeepSpeed 0.19.5's ZeRO-3
universal loader leaves them: every group with group 0's hyperparameters,
``params`` emptied, and one step tensor shared by every flat partition.  The
real engine is exercised by hand (tests/data/universal/z3_ws2_2groups_fp32/README.md).
"""
import copy
import importlib.util
import os
import sys

import torch


def fail(msg):
    print(f"resume_helper_test: FAIL: {msg}")
    sys.exit(1)


class BaseOptimizer:
    """Stand-in for torch.optim.AdamW as DeepSpeed's ZeRO-3 wrapper holds it."""

    def __init__(self, groups, flats, step):
        self.param_groups = groups
        self.state = {f: {"step": step, "exp_avg": torch.zeros_like(f), "exp_avg_sq": torch.ones_like(f)}
                      for f in flats}


class Wrapper:
    """Stand-in for DeepSpeedZeroOptimizer_Stage3: param_groups is the base optimizer's list."""

    def __init__(self, base):
        self.optimizer = base

    @property
    def param_groups(self):
        return self.optimizer.param_groups


class Engine:
    """Stand-in for deepspeed.DeepSpeedEngine after load_checkpoint()."""

    def __init__(self, groups, nflats, universal=True, shared_step=True):
        flats = [torch.full((3 + k,), float(k)) for k in range(nflats)]
        step = torch.tensor(3.0)
        self.optimizer = Wrapper(BaseOptimizer(groups, flats, step))
        if not shared_step:
            for st in self.optimizer.optimizer.state.values():
                st["step"] = st["step"].clone()
        self._universal = universal

    def load_universal_checkpoint(self):
        return self._universal


def as_loaded_by_ds(saved):
    """What DeepSpeed 0.19.5's stage-3 loader leaves: group 0's values in every group, params []."""
    g0 = {k: v for k, v in saved[0].items() if k != "params"}
    return [dict(copy.deepcopy(g0), params=[]) for _ in saved]


def snapshot(engine):
    st = engine.optimizer.optimizer.state
    return [{k: v.clone() for k, v in s.items()} for s in st.values()]


def main():
    helper, z3, z3_tag = sys.argv[1:4]
    spec = importlib.util.spec_from_file_location("gatherfs_resume", helper)
    gr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gr)
    if "deepspeed" in sys.modules:
        fail("the helper imports deepspeed")
    if z3 == "--noop":
        noop(gr, z3_tag)
        return

    opt_path = os.path.join(z3, z3_tag, "zero", "optimizer_state.pt")
    saved = gr._saved_groups(opt_path)
    want = [{k: v for k, v in g.items() if k != "params"} for g in saved]
    if len(saved) < 2 or want[0]["weight_decay"] == want[1]["weight_decay"]:
        fail(f"{opt_path}: not a two-group checkpoint with two weight decays: {want}")

    # the loader's state: group 0's hyperparameters everywhere, one shared step tensor
    tag = None if os.path.exists(os.path.join(z3, "latest_universal")) and \
        open(os.path.join(z3, "latest_universal")).read().strip() == z3_tag else z3_tag
    e = Engine(as_loaded_by_ds(saved), nflats=len(saved))
    before = snapshot(e)
    changes = gr.restore_param_groups(e, z3, tag=tag)
    base = e.optimizer.optimizer
    got = [{k: v for k, v in g.items() if k != "params"} for g in base.param_groups]
    if got != want:
        fail(f"hyperparameters after the helper: {got}, want {want}")
    if any(g["params"] != [] for g in base.param_groups):
        fail("the helper changed params")
    steps = [s["step"] for s in base.state.values()]
    if len({id(s) for s in steps}) != len(steps):
        fail("flat partitions still share a step tensor")
    after = snapshot(e)
    for a, b in zip(before, after):
        if a.keys() != b.keys() or any(not torch.equal(a[k], b[k]) for k in a):
            fail("the helper changed a tensor value")
    if not any("weight_decay" in c for c in changes) or not any("step" in c for c in changes):
        fail(f"changes reported: {changes}")
    # each step tensor is now its own: an in-place increment of one leaves the others
    steps[0] += 1
    if float(steps[1]) != 3.0:
        fail("step tensors still alias")
    print(f"ok: {len(changes)} changes: {'; '.join(changes)}")

    # a second call, and a call on an engine that is right already, change nothing
    if gr.restore_param_groups(e, z3, tag=tag) != []:
        fail("a second call changed something")
    right = Engine(copy.deepcopy(saved), nflats=len(saved), shared_step=False)
    if gr.restore_param_groups(right, z3, tag=tag) != []:
        fail("the helper changed a correct engine")
    print("ok: no-op where nothing is wrong")

    # clear errors
    def expect(msg, fn):
        try:
            fn()
        except gr.ResumeError as x:
            if msg not in str(x):
                fail(f"error {x!r} does not say {msg!r}")
            print(f"ok: refused: {x}")
            return
        fail(f"no error for: {msg}")

    expect("does not load universal checkpoints",
           lambda: gr.restore_param_groups(Engine(as_loaded_by_ds(saved), len(saved), universal=False), z3, tag))
    expect(f"{len(saved)} param groups in the checkpoint, 1 in the optimizer",
           lambda: gr.restore_param_groups(Engine(as_loaded_by_ds(saved)[:1], 1), z3, tag))
    expect("holds no universal checkpoint",
           lambda: gr.restore_param_groups(Engine(as_loaded_by_ds(saved), len(saved)),
                                           os.path.join(z3, z3_tag, "zero")))
    expect("not a universal checkpoint",
           lambda: gr.restore_param_groups(Engine(as_loaded_by_ds(saved), len(saved)), z3, "nope"))



def noop(gr, d):
    """A ZeRO-1/2 engine as DeepSpeed's loader leaves it (each group its own values and step):
    the helper changes nothing."""
    tag = open(os.path.join(d, "latest_universal")).read().strip()
    saved = gr._saved_groups(os.path.join(d, tag, "zero", "optimizer_state.pt"))
    e = Engine(copy.deepcopy(saved), nflats=len(saved), shared_step=False)
    before = snapshot(e)
    changes = gr.restore_param_groups(e, d)
    if changes != [] or [{k: v for k, v in g.items()} for g in e.optimizer.param_groups] != saved:
        fail(f"the helper changed a ZeRO-1/2 engine: {changes}")
    if any(not torch.equal(a[k], b[k]) for a, b in zip(before, snapshot(e)) for k in a):
        fail("the helper changed a tensor value")
    print(f"ok: ZeRO-1/2, {len(saved)} groups: no-op")


if __name__ == "__main__":
    main()
