# SPDX-License-Identifier: Apache-2.0
"""gatherfs_resume: mend what DeepSpeed's ZeRO-3 universal loader gets wrong.

Call ``restore_param_groups(engine, load_dir, tag=None)`` on every rank right
after ``engine.load_checkpoint(load_dir, ...)`` of a universal checkpoint
(``"checkpoint": {"load_universal": true}``), whether ``load_dir`` is a
gatherfs mount or the output of DeepSpeed's ``ds_to_universal.py``.

DeepSpeed's stage-3 universal loader
(``load_hp_checkpoint_state_from_checkpoint_dir_stage3``, measured in
v0.18.0 to v0.19.5) loads every tensor exactly but

1. copies group 0's hyperparameters into every param group (weight decay
   [0.1, 0.0] at save becomes [0.1, 0.1]), and
2. gives every flat partition the same ``step`` tensor object, which torch's
   Adam/AdamW increments in place once per group (3 -> 5 after one step in
   the second group instead of 4).

This function reads the checkpoint's own ``zero/optimizer_state.pt`` (the
tag from ``load_dir/latest_universal`` when ``tag`` is None), puts every
group's hyperparameters (every key but ``params``) back in the DeepSpeed
optimizer wrapper's and its base optimizer's ``param_groups``, and gives each
flat partition its own copy of a shared ``step`` tensor.  It changes no
tensor value.  Where nothing is wrong (ZeRO-1/2, one group) it changes
nothing.  It returns the list of what it changed (empty when nothing).

Standard library and torch only: importing this module does not need
DeepSpeed.
"""

import os

import torch

__all__ = ["restore_param_groups", "ResumeError"]


class ResumeError(RuntimeError):
    """The engine or the checkpoint is not what restore_param_groups() mends."""


def _read_tag(load_dir):
    path = os.path.join(load_dir, "latest_universal")
    if not os.path.isfile(path):
        raise ResumeError(f"{path}: no such file: {load_dir} holds no universal checkpoint "
                          "(pass tag= or load a universal checkpoint)")
    with open(path, encoding="utf-8") as f:
        tag = f.read().strip()
    if not tag or "/" in tag or tag in (".", ".."):
        raise ResumeError(f"{path}: not a tag name: {tag!r}")
    return tag


def _saved_groups(path):
    """The checkpoint's param_groups: a list of dicts (torch's optimizer state_dict layout)."""
    try:
        sd = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # torch raises many kinds for a bad file
        raise ResumeError(f"{path}: cannot be read: {e}") from e
    groups = None
    if isinstance(sd, dict):
        inner = sd.get("optimizer_state_dict")
        if isinstance(inner, dict) and "param_groups" in inner:
            groups = inner["param_groups"]  # ZeRO-3 (gatherfs's view and ds_to_universal)
        elif "param_groups" in sd:
            groups = sd["param_groups"]  # ZeRO-1/2
    if not isinstance(groups, (list, tuple)) or not groups or \
            not all(isinstance(g, dict) for g in groups):
        raise ResumeError(f"{path}: no optimizer param_groups")
    return groups


def _base_optimizer(engine):
    wrapper = getattr(engine, "optimizer", None)
    if wrapper is None or not hasattr(wrapper, "param_groups"):
        raise ResumeError("the engine has no optimizer with param_groups")
    return wrapper, getattr(wrapper, "optimizer", wrapper)


def restore_param_groups(engine, load_dir, tag=None):
    """Restore each param group's hyperparameters and step tensor after a universal load.

    engine: the DeepSpeed engine load_checkpoint() was called on (its
    ``optimizer`` is the ZeRO wrapper, ``optimizer.optimizer`` the torch
    optimizer).  load_dir, tag: as given to load_checkpoint(); tag None means
    the tag named in ``load_dir/latest_universal``.

    Returns a list of strings, one per change ("group 1: weight_decay 0.1 ->
    0.0", "flat partition 1: own step tensor"); [] when nothing was wrong.
    Raises ResumeError when the engine was not configured to load universal
    checkpoints, when load_dir/TAG/zero/optimizer_state.pt is missing or
    unreadable, or when the checkpoint's number of param groups differs from
    the optimizer's.
    """
    check = getattr(engine, "load_universal_checkpoint", None)
    if callable(check) and not check():
        raise ResumeError("the engine does not load universal checkpoints: set "
                          '"checkpoint": {"load_universal": true} in its config')
    if tag is None:
        tag = _read_tag(load_dir)
    path = os.path.join(load_dir, str(tag), "zero", "optimizer_state.pt")
    if not os.path.isfile(path):
        raise ResumeError(f"{path}: no such file: not a universal checkpoint")
    saved = _saved_groups(path)
    wrapper, base = _base_optimizer(engine)
    changes = []
    lists = [wrapper.param_groups]
    if base.param_groups is not wrapper.param_groups:
        lists.append(base.param_groups)
    for groups in lists:
        if len(groups) != len(saved):
            raise ResumeError(f"{path}: {len(saved)} param groups in the checkpoint, "
                              f"{len(groups)} in the optimizer")
    for groups in lists:
        for g, (live, want) in enumerate(zip(groups, saved)):
            for key, value in want.items():
                if key == "params":
                    continue
                if key not in live or not _same(live[key], value):
                    if groups is lists[0]:
                        changes.append(f"group {g}: {key} {live.get(key)!r} -> {value!r}")
                    live[key] = value
    seen = set()
    for k, st in enumerate(base.state.values()):
        step = st.get("step") if isinstance(st, dict) else None
        if not torch.is_tensor(step):
            continue
        if id(step) in seen:
            st["step"] = step.clone()
            changes.append(f"flat partition {k}: own step tensor")
        else:
            seen.add(id(step))
    return changes


def _same(a, b):
    """Equal values: a list and a tuple of the same items are the same (the view and
    torch may disagree on which one betas is); numbers compare by value, bools only with bools."""
    if torch.is_tensor(a) or torch.is_tensor(b):
        return torch.is_tensor(a) and torch.is_tensor(b) and a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b
