"""What is installed: one row per backend (shared by ``turbo backends`` and ``turbo doctor``)."""

from __future__ import annotations

from turbo_core.dispatch.catalog import get_primitive
from turbo_core.plugins.host import get_host


def backend_rows() -> list[dict]:
    """One dict per backend: name, package, version, plugin, available, reason, platforms, archs,
    description, notes, primitives ``{name: {"precision": ..., "variants": [...]}}``."""
    registry = get_host().registry
    rows = []
    for name in registry.backend_names():
        record = registry.backend(name)
        reason = record.unavailable_reason()
        prims = {}
        for prim_name, kernel in sorted(registry.primitives_of(name).items()):
            prims[prim_name] = {
                "precision": get_primitive(prim_name).precision.value,
                "variants": list(kernel.variants),
                "autotune": kernel.autotune,
            }
        info = record.info
        rows.append({
            "name": name,
            "package": info.package,
            "version": info.version,
            "plugin": record.plugin,
            "available": reason is None,
            "reason": reason,
            "platforms": list(info.platforms),
            "archs": list(info.archs) if info.archs is not None else None,
            "description": info.description,
            "notes": info.notes or None,
            "primitives": prims,
        })
    return rows


def why_none_ran(command: str) -> list[str]:
    """Lines explaining why no turbo backend (any but the reference TORCH) ran a case: the backends that
    cannot run here, each with its reason (TRITON on a CPU: set ``TRITON_INTERPRET=1``), and those that
    can but served none of the cases."""
    others = [r for r in backend_rows() if r["name"] != "TORCH"]
    if not others:
        return [f"{command}: no turbo backend ran a case: none is installed besides the reference backend TORCH "
                "(install a backend package, e.g. ./packages/turbo-triton; --include-reference runs TORCH)"]
    up = [r["name"] for r in others if r["available"]]
    head = f"{command}: no turbo backend ran a case"
    if up:
        head += f" ({', '.join(up)} can run here but served none of these cases)"
    down = [r for r in others if not r["available"]]
    lines = [head + (": these cannot run here:" if down else "")]
    lines += [f"  {r['name']}: {r['reason']}" for r in down]
    return lines
