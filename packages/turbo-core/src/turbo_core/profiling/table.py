"""The hot-kernel table of a ``torch.profiler`` run, each row attributed to the turbo op and backend
whose ``turbo::<primitive>[<backend>]`` range (``labels``) encloses it.

Two kinds of table:

* ``device`` (any device kernel was recorded, i.e. a GPU run): one row per (kernel name, turbo
  label); ``total_us`` is the kernels' summed device time, ``self_us`` the same, ``share`` the
  fraction of all recorded device-kernel time.
* ``cpu`` (no device kernel): one row per (CPU op or ``record_function`` range, turbo label);
  ``total_us`` is the inclusive CPU time (children included), ``self_us`` the exclusive time and
  ``share`` is ``self_us`` over all events' self time (so shares add up to 1). A ``turbo::`` range
  is its own label: its ``total_us`` is the time of the turbo calls.

Times are microseconds (floats) as torch's ``FunctionEvent`` reports them. Rows are sorted by
``self_us``, largest first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from turbo_core.profiling.labels import parse_label

__all__ = ["Row", "format_table", "hot_rows"]


@dataclass
class Row:
    """One line of the table (times in microseconds; ``share`` in [0, 1])."""

    kind: str  # "device" or "cpu"
    name: str
    op: str | None  # the turbo primitive whose range encloses it, None outside any turbo call
    backend: str | None
    calls: int
    total_us: float
    self_us: float
    share: float

    @property
    def mean_us(self) -> float:
        return self.total_us / self.calls if self.calls else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "mean_us": self.mean_us}


def _enclosing_label(event: Any) -> tuple[str, str] | None:
    """The innermost ``turbo::`` range enclosing ``event`` (the event itself included)."""
    seen = 0
    while event is not None and seen < 10_000:  # parent chains are short; the bound guards a cycle
        parsed = parse_label(event.name)
        if parsed is not None:
            return parsed
        event = event.cpu_parent
        seen += 1
    return None


def _is_cpu(event: Any) -> bool:
    return getattr(event.device_type, "name", str(event.device_type)) == "CPU"


def _cpu_events(events: Iterable[Any]) -> list[Any]:
    return [e for e in events if _is_cpu(e) and not getattr(e, "is_async", False)]


_LAUNCH = "Launch"  # runtime / driver launch calls: cudaLaunchKernel, cuLaunchKernelEx, hipModuleLaunchKernel...


def _kernel_owners(events: list[Any]) -> list[tuple[Any, Any]]:
    """``(kernel event, the CPU event that launched it or None)`` for every device kernel.

    A kernel launched inside a PyTorch op (or a ``record_function`` range, as the turbo ranges are)
    is linked to it by the profiler (``linked_correlation_id`` = the op's ``id``). A kernel launched
    outside any op, e.g. by Triton's launcher through the driver API, has no such link; its launch
    call (``cuLaunchKernelEx``, ``hipModuleLaunchKernel``...) is a CPU event with the kernel's own
    correlation ``id``, nested in the Python thread's ranges by time: that event is the owner."""
    cpu = [e for e in events if _is_cpu(e)]
    frontend = {e.id: e for e in cpu if not getattr(e, "linked_correlation_id", 0) and not e.is_async}
    launches = {e.id: e for e in cpu if e.id and _LAUNCH in e.name and e.name.startswith(("cu", "hip"))}
    out = []
    for k in events:
        if _is_cpu(k) or getattr(k, "is_user_annotation", False) or parse_label(k.name) is not None:
            continue  # the device-side copy of a range (a user annotation spanning its kernels) is no kernel
        link = getattr(k, "linked_correlation_id", 0)
        owner = frontend.get(link) if link else None
        if owner is None:
            owner = launches.get(k.id)
        out.append((k, owner))
    return out


def _duration(event: Any) -> float:
    tr = event.time_range
    return float(tr.end - tr.start)


def hot_rows(events: Iterable[Any]) -> list[Row]:
    """The table's rows from ``prof.events()`` (a finished ``torch.profiler.profile``): the device
    kernels when any was recorded (each under the turbo range enclosing the CPU event that launched
    it: :func:`_kernel_owners`), else the CPU ops and ranges."""
    events = list(events)
    acc: dict[tuple[str, tuple[str, str] | None], list[float]] = {}
    kernels = _kernel_owners(events)
    if kernels:
        kind = "device"
        for kernel, owner in kernels:
            slot = acc.setdefault((kernel.name, _enclosing_label(owner)), [0, 0.0, 0.0])
            slot[0] += 1
            slot[1] += _duration(kernel)
            slot[2] += _duration(kernel)
    else:
        kind = "cpu"
        for event in _cpu_events(events):
            slot = acc.setdefault((event.name, _enclosing_label(event)), [0, 0.0, 0.0])
            slot[0] += 1
            slot[1] += float(event.cpu_time_total)
            slot[2] += float(event.self_cpu_time_total)
    whole = sum(v[2] for v in acc.values())
    rows = [Row(kind, name, lab[0] if lab else None, lab[1] if lab else None, int(calls), total, own,
                own / whole if whole > 0 else 0.0)
            for (name, lab), (calls, total, own) in acc.items()]
    rows.sort(key=lambda r: (-r.self_us, -r.total_us, r.name))
    return rows


def _us(value: float) -> str:
    return f"{value / 1000:.3f} ms" if value >= 1000 else f"{value:.1f} us"


def format_table(rows: list[Row], top: int | None = None, width: int = 60) -> str:
    """Plain-text table of the first ``top`` rows (all when ``None``); names cut to ``width``."""
    shown = rows if top is None else rows[:top]
    kind = rows[0].kind if rows else "cpu"
    head = ["kernel" if kind == "device" else "op / range", "turbo op [backend]", "calls", "total",
            "mean", "self", "share"]
    body = []
    for r in shown:
        name = r.name if len(r.name) <= width else r.name[:width - 3] + "..."
        owner = f"{r.op}[{r.backend}]" if r.op else "-"
        body.append([name, owner, str(r.calls), _us(r.total_us), _us(r.mean_us), _us(r.self_us),
                     f"{100 * r.share:.1f}%"])
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True)))
             for line in [head, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    title = "device kernels" if kind == "device" else "CPU ops and ranges (no device kernels recorded)"
    more = f" (top {len(shown)} of {len(rows)})" if len(shown) < len(rows) else ""
    return f"hot {title}{more}, by self time\n" + "\n".join(lines)
