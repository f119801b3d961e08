"""What a stage process really used, recorded for the smoke run's check of the stage table (draftlab.pipeline.dvcgen
`check_traces`): with DRAFTLAB_STAGE_TRACE=<folder> set, `stage_main` hands the stage's body a params object whose
sections record the fields read (`start`) and, when the body returns, writes <folder>/<stage>.json with the draftlab
modules in sys.modules and the params keys read (`finish`). Unset (every run but the smoke run's), nothing changes.

How reads are seen: each section object's class is swapped for a subclass that records `section.field` on attribute
access (isinstance, dataclasses.fields / replace and OmegaConf see the section's own class and fields; pickling,
copying and replace give an instance of the original class, so a checkpoint's bytes do not change). `to_dict` of a section
counts the whole section as read; `to_dict` of the whole params (what a stage logs to MLflow) counts nothing. Only the
body's reads count: what stage_main reads before it (validation, the toy world's freeze gate, trainer, threads and
seed) is the harness's."""
from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path

ENV = "DRAFTLAB_STAGE_TRACE"
_READ: set[str] = set()
_MUTED = [0]


@contextmanager
def _muted():
    _MUTED[0] += 1
    try:
        yield
    finally:
        _MUTED[0] -= 1


def _recording(cls: type, section: str) -> type:
    def __getattribute__(self, attr):
        if not _MUTED[0] and not attr.startswith("_") and attr in cls.__dataclass_fields__:
            _READ.add(f"{section}.{attr}")
        return cls.__getattribute__(self, attr)

    def __reduce_ex__(self, protocol):
        with _muted():
            rv = cls.__reduce_ex__(self, protocol)
        if isinstance(rv, tuple) and len(rv) > 1 and rv[1] and rv[1][0] is sub:  # rebuilt as the section's own class
            rv = (rv[0], (cls, *rv[1][1:]), *rv[2:])
        return rv

    sub = type(cls.__name__, (cls,), {"__slots__": (), "__getattribute__": __getattribute__,
                                      "__reduce_ex__": __reduce_ex__, "_trace_section": section,
                                      "__class__": property(lambda self: cls),  # what pickle, copy and replace see
                                      "__module__": cls.__module__, "__qualname__": cls.__qualname__})
    return sub


def start(params):
    """`params` with its sections recording reads (the same object; nothing when DRAFTLAB_STAGE_TRACE is unset)."""
    if not os.environ.get(ENV):
        return params
    import dataclasses

    import draftlab.params as P

    for f in dataclasses.fields(params):
        sec = getattr(params, f.name)
        if dataclasses.is_dataclass(sec) and not hasattr(type(sec), "_trace_section"):
            object.__setattr__(sec, "__class__", _recording(type(sec), f.name))  # frozen sections too
    if not getattr(P.to_dict, "_traced", False):
        plain = P.to_dict

        def to_dict(obj):
            section = getattr(type(obj), "_trace_section", None)
            if section and not _MUTED[0]:
                _READ.add(section)  # the whole section goes on (a report, a run key)
            with _muted():
                return plain(obj)

        to_dict._traced = True
        P.to_dict = to_dict
    return params


def finish(stage: str) -> None:
    """Write <folder>/<stage>.json: the draftlab modules this process imported and the params keys the body read."""
    folder = os.environ.get(ENV)
    if not folder or os.environ.get("RANK", "0") not in ("", "0"):
        return
    mods = sorted(m[len("draftlab."):] if m != "draftlab" else "" for m in list(sys.modules)
                  if m == "draftlab" or m.startswith("draftlab."))
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / f"{stage}.json").write_text(json.dumps({"stage": stage, "modules": mods, "params": sorted(_READ)},
                                                           indent=1) + "\n")
