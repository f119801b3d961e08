"""How every static-shape step is compiled (`engine.compile`): the target's stream pass, the drafter's context and
block passes, a corrector's proposal step, the verify-width cut.

One rule for all of them: `torch.compile(fullgraph=True, dynamic=False)` — a graph break or a symbolic shape is an
error, not a slow path; one graph per shape —, in mode `reduce-overhead` on CUDA (CUDA graphs: a replay is one
launch, no Python dispatch per op), inductor's default on CPU. A test (or the dry rehearsal) hands in its own
`backend` (a counting one, or `DRAFTLAB_COMPILE_BACKEND=eager`: no inductor on 2 cores). Every `compile_steps` (the
target's, the drafter's, a corrector proposal's, the verify-width rule's) installs its steps through `compiled_steps`,
the one place that compiles. The shapes a run meets are planned before anything compiles (`draftlab.decoding.shapes`:
a run's declaration, or a request's own shapes), and `plan_limit` raises torch's recompile limit to the graphs the
process has planned per step (torch counts a step's graphs per function, across runs and targets).

Two rules of CUDA graphs the callers obey (docs/decisions.md "A bounded compiled engine"):
- a buffer that compiled steps mutate in place (K/V, the fills) is allocated once, marked a static address on CUDA
  (`static_buffer`) and written in place, so a graph writes it where it is;
- each call of a compiled function frees the CUDA-graph outputs of the previous call still alive (torch: "CUDA
  Graphs will free tensors of a prior iteration"). So a `Step` whose outputs live in graph memory clones them at
  its boundary, before the next compiled call. `Step.clones` says whether it does (CUDA graphs, or the emulation).

The emulation (`emulate_graph_memory`, the CPU tests and the dry rehearsal): every compiled call first overwrites
the outputs of the previous compiled call that are still alive with NaN (floats) or -1 (integers), as a replay
would reuse their memory; a caller that reads an output after the next call without the boundary's clone then
decodes other tokens, which the tests see.
"""
from __future__ import annotations

import os
import sys

from draftlab.errors import DraftlabError

# torch is imported where it is used: the configuration (config.engine) reads MAX_GRAPHS, and a stage sets OpenMP's
# wait policy before torch loads (draftlab.omp)

BACKEND_ENV = "DRAFTLAB_COMPILE_BACKEND"  # a torch.compile backend name for every step (eager, aot_eager, inductor)
EMULATE_ENV = "DRAFTLAB_EMULATE_CUDA_GRAPHS"  # 1: the CUDA-graph memory rule emulated on CPU (tests, dry rehearsal)
MAX_GRAPHS = 48  # the default cap on the graphs one compiled run plans (engine.max_graphs; `TargetModel.compile_steps`'s)


class GraphMemory:
    """The outputs of the last compiled call, held as a graph's pool holds them and overwritten at the next compiled
    call (the emulation of CUDA graphs' rule); a caller that kept a reference sees NaN / -1 from then on."""

    def __init__(self) -> None:
        self.last: list[torch.Tensor] = []
        self.calls = 0
        self.poisoned = 0  # output tensors overwritten at a next call
        self.read_after = 0  # of those, how many a caller still referenced (kept past the boundary)

    def before_call(self) -> None:
        import torch

        self.calls += 1
        for t in self.last:
            with torch.no_grad():
                t.fill_(float("nan") if t.is_floating_point() else -1)
            self.poisoned += 1
            self.read_after += sys.getrefcount(t) > 3  # this list, the loop variable, getrefcount's argument
        self.last = []

    def after_call(self, out) -> None:
        self.last = list(_tensors(out))


_MEMORY: GraphMemory | None = GraphMemory() if os.environ.get(EMULATE_ENV) == "1" else None


def emulate_graph_memory(on: bool = True) -> GraphMemory | None:
    """Turn the CPU emulation of CUDA graphs' memory rule on (a fresh record, returned) or off (None). Steps compiled
    while it is on poison and clone; steps compiled before keep what they were built with."""
    global _MEMORY
    _MEMORY = GraphMemory() if on else None
    return _MEMORY


def graph_memory() -> GraphMemory | None:
    return _MEMORY


def _tensors(out):
    import torch

    if torch.is_tensor(out):
        yield out
    elif isinstance(out, (tuple, list)):
        for x in out:
            yield from _tensors(x)
    elif isinstance(out, dict):
        for x in out.values():
            yield from _tensors(x)


def _clone(out):
    import torch

    if torch.is_tensor(out):
        return out.clone()
    if isinstance(out, tuple):
        return tuple(_clone(x) for x in out)
    if isinstance(out, list):
        return [_clone(x) for x in out]
    if isinstance(out, dict):
        return {k: _clone(v) for k, v in out.items()}
    return out


class Step:
    """A compiled step: `inner` (the torch.compile'd function) behind the CUDA-graph boundary. `clones`: its outputs
    are cloned before they are handed back (they live in graph memory, or the emulation is on). `name`: the step
    function's name (what the graph counts are keyed by); `backend`: the backend it was compiled with (None: the
    project's default), which torch guards on (two backend objects: two graphs of one shape)."""

    def __init__(self, fn, inner, clones: bool, memory: GraphMemory | None, backend=None):
        self.name, self.inner, self.clones, self.memory = fn.__name__, inner, clones, memory
        self.__name__, self.backend = fn.__name__, backend

    def __call__(self, *args, **kwargs):
        if self.memory is not None:
            self.memory.before_call()
        out = self.inner(*args, **kwargs)
        if self.memory is not None:
            self.memory.after_call(out)
        return _clone(out) if self.clones else out


def uses_graphs(cuda: bool, backend=None) -> bool:
    """Whether a step compiled so keeps its outputs in CUDA-graph memory (reduce-overhead, or the cudagraphs
    backend)."""
    backend = backend if backend is not None else os.environ.get(BACKEND_ENV) or None
    return cuda and (backend is None or backend == "cudagraphs")


def compile_step(fn, cuda: bool, backend=None) -> Step:
    """`fn` compiled with the project's options (see the module docstring), behind its boundary."""
    import torch

    backend = backend if backend is not None else os.environ.get(BACKEND_ENV) or None
    if backend is not None:
        inner = torch.compile(fn, backend=backend, fullgraph=True, dynamic=False)
    else:
        inner = torch.compile(fn, fullgraph=True, dynamic=False, mode="reduce-overhead" if cuda else None)
    memory = _MEMORY
    return Step(fn, inner, uses_graphs(cuda, backend) or memory is not None, memory, backend)


def compiled_steps(mode: str, fns: tuple, cuda: bool, backend=None) -> tuple[tuple, str]:
    """What a `compile_steps(mode)` installs: `off` -> (the functions themselves, "off"); `on` -> (each compiled with
    the project's options behind its boundary, `compile_step`; what runs, `step_label`). Another mode is one line."""
    if mode not in ("on", "off"):
        raise DraftlabError(f"compile_steps mode {mode!r} is not on or off; pass engine.compile resolved for the "
                            f"device (EngineConfig.resolved)")
    if mode == "off":
        return tuple(fns), "off"
    return tuple(compile_step(fn, cuda, backend) for fn in fns), step_label(cuda, backend)


def step_label(cuda: bool, backend=None) -> str:
    """What a compiled step runs as (recorded with every run): reduce-overhead | inductor | the backend's name."""
    backend = backend if backend is not None else os.environ.get(BACKEND_ENV) or None
    if backend is not None:
        return backend if isinstance(backend, str) else getattr(backend, "__name__", type(backend).__name__)
    return "reduce-overhead" if cuda else "inductor"


def static_buffer(t: torch.Tensor) -> torch.Tensor:
    """Mark a buffer that compiled steps mutate in place as a static address (CUDA only; a no-op elsewhere)."""
    import torch

    if t.is_cuda:
        torch._dynamo.mark_static_address(t, guard=False)
    return t


def set_recompile_limit(per_function: int) -> int:
    """Raise torch's recompile limit (graphs per function before `fullgraph=True` fails; 8 by default) to the run's
    declared count, never lower it; returns the limit in force."""
    import torch

    cfg = torch._dynamo.config
    name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
    setattr(cfg, name, max(int(getattr(cfg, name)), int(per_function)))
    if hasattr(cfg, "accumulated_recompile_limit"):
        cfg.accumulated_recompile_limit = max(cfg.accumulated_recompile_limit, 4 * int(per_function))
    return int(getattr(cfg, name))


_PLANNED: dict[str, set] = {}  # step -> every graph (its key) that the compiled runs of this process planned for it


def backend_key(step) -> object:
    """What a step's graphs depend on through its backend: the name or None (equal names share graphs), else the
    backend object's identity (torch tells backend objects apart; a graph keeps its backend alive)."""
    b = getattr(step, "backend", None)
    return b if b is None or isinstance(b, str) else ("object", id(b))


def plan_limit(graphs: dict[str, set]) -> int:
    """Add a run's planned graphs (step -> the keys of its graphs: what each depends on) to the process's and raise
    torch's recompile limit to the most graphs one step has planned (a graph two runs plan counts once); -> the limit
    in force."""
    for step, keys in graphs.items():
        _PLANNED.setdefault(step, set()).update(keys)
    return set_recompile_limit(max(planned_graphs().values(), default=1))


def planned_graphs() -> dict[str, int]:
    """step -> the graphs the compiled runs of this process have planned for it."""
    return {step: len(keys) for step, keys in _PLANNED.items()}


def cudagraph_skips() -> int:
    """Inductor's count of compiled functions that fell back from CUDA graphs (a mutated non-static input, a CPU
    tensor, ...): any is a silent slow path that would make every timing a mixture."""
    try:
        from torch._dynamo.utils import counters

        return int(sum(counters["inductor"].get(k, 0) for k in ("cudagraph_skips",)))
    except Exception:  # noqa: BLE001 (a torch without the counter)
        return 0
