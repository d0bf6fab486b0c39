"""The machine a benchmark runs on and the output of its results: ``machine_info`` (CPU, cores,
load, library versions, git hash), number formatting, printed and markdown tables, and
``write_results`` (``results/<name>.csv`` + ``.md``).
"""

from __future__ import annotations

import math
import os
import platform
import subprocess
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"


def machine_info() -> dict:
    """CPU model (``lscpu``), core count, load average and library versions."""
    model = platform.processor() or platform.machine()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    import numba
    import numpy
    import pymc

    info = {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "numba": numba.__version__,
        "pymc": pymc.__version__,
    }
    try:
        here = Path(__file__).parent
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here,
                             capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "../pymc_ibp"], cwd=here,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        info["git"] = rev + (" + uncommitted pymc_ibp changes" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        info["git"] = "?"
    try:
        info["load_at_start"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        pass
    return info


def machine_line(info: dict) -> str:
    return (f"machine: {info['cpu']}, {info['cores']} cores (load average at start "
            f"{info.get('load_at_start', '?')}); python {info['python']}, numpy {info['numpy']}, "
            f"numba {info['numba']}, pymc {info['pymc']}; pymc_ibp at git {info.get('git', '?')}")


def fmt(x, digits=3):
    """Compact number formatting for tables."""
    if x is None:
        return "-"
    if isinstance(x, (bool, np.bool_)):
        return str(bool(x))
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, str):
        return x
    x = float(x)
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    ax = abs(x)
    if ax >= 1e5 or ax < 1e-3:
        return f"{x:.{digits - 1}e}"
    if ax >= 100:
        return f"{x:.0f}"
    return f"{x:.{digits}g}"


def md_table(rows: list[dict], columns: list[str], headers: list[str] | None = None) -> str:
    headers = headers or columns
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        out.append("| " + " | ".join(fmt(r.get(c)) for c in columns) + " |")
    return "\n".join(out)


def print_table(rows: list[dict], columns: list[str]) -> None:
    cells = [[fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) if cells else len(c)
              for i, c in enumerate(columns)]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)))
    for x in cells:
        print("  ".join(v.rjust(w) for v, w in zip(x, widths, strict=True)))


def write_results(name: str, rows: list[dict], columns: list[str], title: str,
                  notes: list[str], info: dict,
                  extra_tables: list[tuple[str, list[dict], list[str]]] = (),
                  csv_rows: list[dict] | None = None):
    """Write ``results/<name>.csv`` (all rows, all columns; ``csv_rows`` instead of ``rows``
    when given, e.g. finer-grained rows than the markdown's first table) and
    ``results/<name>.md``."""
    RESULTS.mkdir(exist_ok=True)
    csv_rows = rows if csv_rows is None else csv_rows
    allcols = list(dict.fromkeys([c for r in csv_rows for c in r]))
    with open(RESULTS / f"{name}.csv", "w") as f:
        f.write(",".join(allcols) + "\n")
        for r in csv_rows:
            f.write(",".join("" if r.get(c) is None else str(r.get(c)) for c in allcols) + "\n")
    md = [f"# {title}", "", machine_line(info), "", md_table(rows, columns), ""]
    for sub_title, sub_rows, sub_cols in extra_tables:
        md += [f"### {sub_title}", "", md_table(sub_rows, sub_cols), ""]
    md += [f"* {n}" for n in notes]
    (RESULTS / f"{name}.md").write_text("\n".join(md) + "\n")
    print(f"\nwrote {RESULTS / (name + '.csv')} and {RESULTS / (name + '.md')}")
