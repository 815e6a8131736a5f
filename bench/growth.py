#!/usr/bin/env python3
"""The growth run of bench/compare.py alone (issue 18, flat per-step cost): one
`picogent run` session through 2,000 scripted `read` steps with `context_window` 20,000
(compaction on); RSS and wall time per step at 100, 500, 1,000 and 2,000 steps.
Run: `bash bench/growth.sh [--record]`. Goal: at 2,000 steps, per step within 1.5x of
the 100-step figure, RSS under 10 MB.
"""
import shutil, tempfile

from compare import growth
from report import emit, table


def main():
    home = tempfile.mkdtemp(prefix="bench-growth-home-")
    g = growth(home)
    shutil.rmtree(home, ignore_errors=True)
    base, base_cpu = (g[0][2], g[0][3]) if g else (float("nan"), float("nan"))
    rows = [(str(n), f"{rss:.1f} MB", f"{ms:.2f} ms ({ms / base:.2f}x)", f"{cpu:.2f} ms ({cpu / base_cpu:.2f}x)")
            for n, rss, ms, cpu in g]
    text = table("Growth: per-step cost and RSS through 2,000 steps", "bench/growth.py", rows,
                 ("steps", "RSS", "wall per step since the previous mark (vs 100)", "picogent CPU per step (vs 100)"),
                 command="bash bench/growth.sh --record")
    text += "\nOne `picogent run` session through 2,000 scripted read steps, `context_window` 20,000 (compaction on). Goal: within 1.5x of the 100-step figure at 2,000 steps; RSS under 10 MB.\n"
    emit(text)


if __name__ == "__main__":
    main()
