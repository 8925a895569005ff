"""Charts of benchmark results: ``jaxfeed bench NAME --plot DIR``.

Each benchmark writes its results as JSON (:func:`jaxfeed.bench._common.save_json`); this module
reads one and draws a horizontal bar chart per case, jaxfeed's bars in blue and the peers' in
grey, titled with the machine and the command that produced it. The rows it understands are the
ones the benchmarks write: ``{"case", "name", <measure>}`` lists (``results`` or ``rows``), or a
``medians`` mapping of name to value.

>>> rows = bars({"results": [{"case": "c", "name": "jaxfeed", "rows_per_s": 10.0},
...                          {"case": "c", "name": "peer", "rows_per_s": 5.0}]})
>>> rows
[('c', 'jaxfeed', 10.0, 'rows/s'), ('c', 'peer', 5.0, 'rows/s')]
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from jaxfeed._base.extras import require

# the measure of a row, and how the chart labels it; the first key a row has is drawn
MEASURES = {
    "rows_per_s": "rows/s",
    "rows_per_second": "rows/s",
    "tokens_per_s": "tokens/s",
    "real_tokens_per_s": "real tokens/s",
    "ms_per_step": "ms per step (lower is better)",
    "ms": "ms (lower is better)",
    "seconds": "seconds (lower is better)",
    "mb_per_device": "MB per device (lower is better)",
}


def bars(payload: dict[str, Any]) -> list[tuple[str, str, float, str]]:
    """``(case, name, value, unit)`` for every row of a benchmark's JSON ``payload``."""
    out = []
    for key in ("results", "rows"):
        rows = payload.get(key)
        if not isinstance(rows, list):
            continue
        for row in rows:
            if not isinstance(row, dict):
                continue
            measure = next((m for m in MEASURES if isinstance(row.get(m), int | float)), None)
            label = row.get("name") or row.get("implementation") or row.get("mode")
            if measure is None or not isinstance(label, str):
                continue
            value = float(row[measure])
            if math.isfinite(value):
                out.append((str(row.get("case", "")), label.strip(), value, MEASURES[measure]))
    medians = payload.get("medians")
    if not out and isinstance(medians, dict):
        out = [("", str(k), float(v), "rows/s") for k, v in medians.items()]
    return out


def plot_results(json_path: str | Path, out_dir: str | Path, command: str) -> Path | None:
    """Draw the chart of one results file into ``out_dir/NAME.png``; None when it has no rows."""
    require("matplotlib", "bench", "jaxfeed bench --plot")
    # matplotlib is imported only when a chart is drawn (the command must start without it)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    json_path = Path(json_path)
    payload = json.loads(json_path.read_text())
    rows = bars(payload)
    if not rows:
        return None
    cases = list(dict.fromkeys(case for case, *_ in rows))
    fig, axes = plt.subplots(
        len(cases), 1, figsize=(9, 0.45 * len(rows) + 1.2 * len(cases) + 0.8), squeeze=False
    )
    for ax, case in zip(axes[:, 0], cases, strict=True):
        these = [r for r in rows if r[0] == case]
        labels = [name for _, name, _, _ in these]
        values = [value for _, _, value, _ in these]
        colors = ["tab:blue" if n.lower().startswith("jaxfeed") else "tab:gray" for n in labels]
        ax.barh(range(len(these)), values, color=colors)
        ax.set_yticks(range(len(these)), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(these[0][3], fontsize=8)
        ax.set_title(case, fontsize=9, loc="left")
        for i, value in enumerate(values):
            ax.text(
                value,
                i,
                f" {value:,.0f}" if value >= 100 else f" {value:.3g}",
                va="center",
                fontsize=7,
            )
        ax.margins(x=0.18)
    machine = payload.get("machine", "")
    fig.suptitle(f"{json_path.stem}: {command}\n{machine}", fontsize=9)
    fig.tight_layout()
    out = Path(out_dir) / f"{json_path.stem}.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.stem + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(out)
    return out
