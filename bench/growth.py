#!/usr/bin/env python3
"""The growth run of bench/compare.py alone (issue 18, flat per-step cost): one
`picogent run` session through 2,000 scripted `read` steps with `context_window` 20,000
(compaction on); RSS and wall time per step at 100, 500, 1,000 and 2,000 steps.
Run: `bash bench/growth.sh [--record]`. Goal: at 2,000 steps, per step within 1.5x of
the 100-step figure, RSS under 10 MB.

A/B on a shared, noisy machine: `python3 bench/growth.py --ab NAME=BINARY[+VAR=VALUE...]
... [--runs N]` runs the variants alternately N times each (an environment variable
after `+`, e.g. `+MALLOC_ARENA_MAX=2`) and prints each mark's mean and range per variant.
"""
import shutil, statistics, sys, tempfile

from compare import growth
from report import emit, table


def ab(specs, runs):
    variants = []
    for spec in specs:
        name, _, rest = spec.partition("=")
        binary, *env = rest.split("+")
        variants.append((name, binary, dict(e.split("=", 1) for e in env)))
    results = {name: [] for name, _, _ in variants}
    home = tempfile.mkdtemp(prefix="bench-growth-home-")
    for _ in range(runs):
        for name, binary, env in variants:
            results[name].append(growth(home, binary=binary, extra_env=env))
    shutil.rmtree(home, ignore_errors=True)
    span = lambda xs, f: f"{statistics.mean(xs):{f}} ({min(xs):{f}}–{max(xs):{f}})"
    print("| variant | steps | RSS MB, mean (min–max) | CPU ms/step, mean (min–max) | CPU vs 100 |")
    print("|---|---|---|---|---|")
    for name, _, _ in variants:
        runs_ = [r for r in results[name] if len(r) == 4]
        for k in range(4):
            rss = [r[k][1] for r in runs_]
            cpu = [r[k][3] for r in runs_]
            ratio = statistics.mean(r[k][3] / r[0][3] for r in runs_)
            print(f"| {name} | {runs_[0][k][0]} | {span(rss, '.1f')} | {span(cpu, '.3f')} | {ratio:.2f}x |")


def main():
    if "--ab" in sys.argv:
        args = sys.argv[sys.argv.index("--ab") + 1:]
        runs = 3
        if "--runs" in args:
            i = args.index("--runs")
            runs = int(args[i + 1])
            args = args[:i] + args[i + 2:]
        return ab(args, runs)
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
