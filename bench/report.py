"""Shared by the benchmark scripts: a Markdown table with the machine's facts, printed
and, with --record, put on top of bench/RESULTS.md (earlier results stay below)."""
import datetime, os, platform, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where cargo put the release build (CARGO_TARGET_DIR when set, as cargo itself reads it).
TARGET = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
BIN = os.path.join(TARGET, "release/picogent")


def table(title, script, rows, columns=("measure", "value", "note", "target"), command="bash bench/run.sh --record"):
    version = subprocess.run([BIN, "--version"], capture_output=True, text=True).stdout.strip()
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    lines = [f"## {title} ({datetime.date.today()}, {version})", "",
             f"Machine: {os.cpu_count()} cores, {mem_gib:.0f} GiB, {platform.platform()}. "
             f"Command: `{command}` (this table: `{script}`).", "",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def emit(text):
    print(text)
    if "--record" not in sys.argv:
        return
    path = os.path.join(ROOT, "bench/RESULTS.md")
    old = open(path).read() if os.path.exists(path) else "# Benchmark results\n\nNewest first.\n"
    head, sep, rest = old.partition("\n## ")
    with open(path, "w") as f:
        f.write(head.rstrip() + "\n\n" + text + ("\n## " + rest if sep else ""))
