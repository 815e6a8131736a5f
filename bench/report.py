"""Shared by the benchmark scripts: each prints its figures as one Markdown section (a
`## Title (date, version)` header, the machine's facts and the command, then its table
and any note) and, with --record, records that section in bench/RESULTS.md.

bench/RESULTS.md holds one current section per benchmark, in the order of BENCHMARKS
below, under an index (benchmark, the command that records it, the date of its figures)
that is written here. A section's key is its title without the date and version
(`## Core (2026-11-30, picogent 0.1.0)` is `Core`; see key_of). Recording replaces the
section with the same key and moves the one it replaces, verbatim, to the top of
bench/HISTORY.md, which is newest first.

Scripts in other languages go through the same code, their section's body (table and
note) on stdin (bench/report.mjs does this for the page benchmarks):

    ... | python3 bench/report.py emit --title TITLE --script bench/x.sh --command CMD [--bin PATH|-] [--record]
"""
import argparse, datetime, os, platform, re, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where cargo put the builds: CARGO_TARGET_DIR when set (as cargo itself reads it, a
# relative one from the current folder), else ./target.
TARGET = os.path.abspath(os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target"))
BIN = os.path.join(TARGET, "release/picogent")
RESULTS = os.path.join(ROOT, "bench/RESULTS.md")
HISTORY = os.path.join(ROOT, "bench/HISTORY.md")

# The benchmarks of bench/RESULTS.md, in the order they are shown there: the key, a
# pattern the title starts with once its date is stripped (for titles that carry a
# parameter), the command that records it, and the script that writes the table.
BENCHMARKS = [
    ("Core", r"Core\b", "bash bench/run.sh --record", "bench/core.py"),
    ("Agent mode", r"Agent mode\b", "bash bench/run.sh --record", "bench/agent.py"),
    ("/events under concurrent senders", r"/events under \d+ concurrent senders\b",
     "python3 bench/events.py [--ab NAME=BIN ...] --record", "bench/events.py"),
    ("Chat mode", r"Chat mode\b", "bash bench/run.sh --record", "bench/chat.py"),
    ("GitHub mode", r"GitHub mode\b", "python3 bench/github.py [N] --record", "bench/github.py"),
    ("Growth", r"Growth\b", "bash bench/growth.sh --record", "bench/growth.py"),
    ("Prompt caching", r"Prompt caching\b", "bash bench/cache.sh --record", "bench/cache.py"),
    ("Side by side", r"Side by side\b", "bash bench/compare.sh --record", "bench/compare.py"),
    ("Sandbox cost", r"Sandbox cost\b", "python3 bench/sandbox.py [--bin A --bin B] --record", "bench/sandbox.py"),
    ("Build profiles", r"Build profiles\b", "bash bench/profile.sh RELEASE_BIN DIST_BIN [RUNS] --record", "bench/profile.py"),
    ("Crash trials", r"Crash trials\b", "bash bench/crash_trials.sh [N] --record", "bench/crash_trials.sh"),
    ("Random-instant crash trials", r"Random-instant crash trials\b",
     "bash bench/crash_trials.sh --random [N] --record", "bench/crash_random.sh"),
    ("Browser: streaming a long answer", r"Browser: streaming (?!.*(one code block|paced))",
     "node bench/stream.mjs [RUNS] [--kb N] --record", "bench/stream.mjs"),
    ("Browser: streaming one long code block", r"Browser: streaming .*one code block",
     "node bench/stream.mjs [RUNS] [--kb N] --code --record", "bench/stream.mjs"),
    ("Browser: streaming at a model's pace", r"Browser: streaming .*paced",
     "node bench/stream.mjs [RUNS] [--kb N] --rate KBPS --record", "bench/stream.mjs"),
    ("Browser: a long run", r"Browser: a \d+-step run\b",
     "node bench/page.mjs [STEPS] [RUNS] [--kb N] [--sessions N] --record", "bench/page.mjs"),
    ("A long session's load and other connections", r"A long session's load\b",
     "node --experimental-websocket bench/bigsession.mjs [MB] [--against DIR [--as NAME]] --record",
     "bench/bigsession.mjs"),
    ("Build times", r"Build times\b", "bash bench/build_times.sh CHECKOUT [LABEL] (then report.py emit --record)",
     "bench/build_times.sh"),
    ("Fleet: tasks per minute", r"Fleet: tasks per minute\b", "bash bench/fleet.sh --record", "bench/fleet.py"),
    ("Fleet: /events acknowledgement", r"Fleet: /events acknowledgement\b", "bash bench/fleet.sh --record",
     "bench/fleet.py"),
    ("Fleet: a worker's idle memory", r"Fleet: a worker's idle memory\b", "bash bench/fleet.sh --record",
     "bench/fleet.py"),
]

DATE = r"\d{4}-\d{2}-\d{2}"
INDEX_START = "<!-- index:"
INDEX_END = "<!-- /index -->"
RESULTS_INTRO = "# Benchmark results\n"
HISTORY_INTRO = """# Benchmark history

Earlier figures. When a benchmark's script records a new section in bench/RESULTS.md
(`--record`, bench/report.py), the section it replaces is moved here, verbatim, on top.
"""


def version(binary=BIN):
    """`picogent --version` of `binary`; the source's version (Cargo.toml) when there is
    no binary to ask (`-`, or not built)."""
    if binary and binary != "-":
        try:
            out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
            if out:
                return out
        except (OSError, subprocess.SubprocessError):
            pass
    m = re.search(r'^version\s*=\s*"([^"]+)"', open(os.path.join(ROOT, "Cargo.toml")).read(), re.M)
    return f"picogent {m.group(1) if m else '?'}"


def header(title, script, command, binary=BIN):
    """A section's first lines: its title with the date and version, the machine, the command."""
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"## {title} ({datetime.date.today()}, {version(binary)})\n\n"
            f"Machine: {os.cpu_count()} cores, {mem_gib:.0f} GiB, {platform.platform()}. "
            f"Command: `{command}` (this table: `{script}`).\n")


def table(title, script, rows, columns=("measure", "value", "note", "target"), command="bash bench/run.sh --record",
          binary=BIN):
    lines = ["", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return header(title, script, command, binary) + "\n".join(lines) + "\n"


def emit(text, record=None):
    """Prints a section; records it when `record`, or (None) when --record is an argument."""
    print(text)
    if record or (record is None and "--record" in sys.argv):
        record_section(text)


def key_of(title):
    """The benchmark a section's title names: the title without its date and what goes with
    it ("(2026-11-30, picogent 0.1.0)", "(2026-12-01, issue 25)", ", 2026-12-01"), or the
    key in BENCHMARKS whose pattern it starts with."""
    t = title.strip()
    if t.startswith("## "):
        t = t[3:].strip()
    inner = r"(?:[^()]|\([^()]*\))*"  # a parenthesis's text, one level of nesting allowed
    t = re.sub(r"\s*(\(" + inner + DATE + inner + r"\)|,\s*" + DATE + r".*)\s*$", "", t)
    for key, pattern, _, _ in BENCHMARKS:
        if re.match(pattern, t):
            return key
    return t


def split(text):
    """(intro, [section, ...]) of a results file: a section runs from its `## ` line to the
    next one; the index between its markers is left out (it is written anew)."""
    intro, sections, current = [], [], None
    fence = in_index = False
    for line in text.splitlines(keepends=True):
        if not fence and line.startswith(INDEX_START):
            in_index = True
        if in_index:
            in_index = not line.startswith(INDEX_END)
            continue
        if line.startswith("```"):
            fence = not fence
        if not fence and line.startswith("## "):
            current = [line]
            sections.append(current)
        else:
            (current if current is not None else intro).append(line)
    return "".join(intro), ["".join(s) for s in sections]


def title_of(section):
    return section.split("\n", 1)[0][3:].strip()


def index(sections):
    """The index of the current sections: every benchmark in BENCHMARKS (those not recorded
    yet too), then any other section, each with its command, script and date."""
    by_key = {key_of(title_of(s)): s for s in sections}
    rows = []
    for key, _, command, script in BENCHMARKS:
        s = by_key.pop(key, None)
        date = re.search(DATE, title_of(s)) if s else None
        rows.append((key, f"`{command}`", f"`{script}`", date.group(0) if date else ("—" if s else "not recorded")))
    for key, s in by_key.items():
        date = re.search(DATE, title_of(s))
        script = re.search(r"\(this table: `([^`]+)`\)", s)
        rows.append((key, "—", f"`{script.group(1)}`" if script else "—", date.group(0) if date else "—"))
    lines = [f"{INDEX_START} written by bench/report.py from the sections below; edits here are lost -->", "",
             "| benchmark | recorded by | script | figures of |", "|---|---|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines + ["", INDEX_END]) + "\n"


def render(intro, sections):
    """A results file: the intro, the index, then the sections in the order of BENCHMARKS
    (others after them, in the order they came)."""
    order = {key: i for i, (key, _, _, _) in enumerate(BENCHMARKS)}
    sections = sorted((s.strip("\n") + "\n" for s in sections),
                      key=lambda s: order.get(key_of(title_of(s)), len(order)))
    return (intro.strip("\n") + "\n\n" + index(sections) + "\n" + "\n".join(sections)).rstrip("\n") + "\n"


def write(path, text):
    """Writes `path` whole or not at all."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".report-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def to_history(moved, history=HISTORY):
    """Puts sections, verbatim and in their order, on top of the history file's sections."""
    old = open(history).read() if os.path.exists(history) else HISTORY_INTRO
    lines = old.splitlines(keepends=True)
    fence, at = False, len(lines)
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fence = not fence
        if not fence and line.startswith("## "):
            at = i
            break
    head, rest = "".join(lines[:at]).strip("\n") + "\n\n", "".join(lines[at:])
    write(history, head + "\n".join(s.strip("\n") + "\n" for s in moved) + ("\n" + rest if rest else ""))


def record_section(text, results=RESULTS, history=HISTORY):
    """Records each `## ` section of `text` as its benchmark's current one in `results`;
    the section it replaces (any with the same key) goes to the top of `history`.
    Returns the sections moved."""
    stray, new = split(text)
    if not new or stray.strip():
        raise ValueError("a recorded text is `## Title` sections and nothing before them")
    old = open(results).read() if os.path.exists(results) else RESULTS_INTRO
    intro, sections = split(old)
    moved = []
    for section in new:
        key = key_of(title_of(section))
        same = [i for i, s in enumerate(sections) if key_of(title_of(s)) == key]
        moved += [sections[i] for i in same]
        if same:
            sections[same[0]] = section
            sections = [s for i, s in enumerate(sections) if i not in same[1:]]
        else:
            sections.append(section)
    # History first: if the second write fails, a section is in both files, not lost.
    if moved:
        to_history(moved, history)
    write(results, render(intro, sections))
    return moved


def main():
    p = argparse.ArgumentParser(description="Benchmark sections for bench/RESULTS.md.")
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("emit", help="prints a section whose body (table and note) is on stdin; "
                                    "--record also records it")
    e.add_argument("--title", required=True, help="the title, without the date and version")
    e.add_argument("--script", required=True, help="the script that measured it")
    e.add_argument("--command", required=True, help="the command that was run")
    e.add_argument("--bin", default=BIN, help="the picogent whose --version to give; - for the source's")
    e.add_argument("--record", action="store_true")
    args = p.parse_args()
    body = sys.stdin.read().strip("\n")
    emit(header(args.title, args.script, args.command, args.bin) + "\n" + body + "\n", record=args.record)


if __name__ == "__main__":
    main()
