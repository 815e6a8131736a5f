// The page benchmarks' way to bench/report.py, so that every benchmark's section is
// written by the same code: the section's body (a Markdown table and any note) goes to
// `python3 bench/report.py emit` on stdin, which adds the header (title, date, version,
// machine, command), prints the section and, with --record, records it in
// bench/RESULTS.md (the section it replaces moves to bench/HISTORY.md).
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));

/** The command-line arguments: whether --record is among them, and the others. */
export function cli() {
  const all = process.argv.slice(2);
  return { record: all.includes("--record"), args: all.filter((a) => a !== "--record") };
}

/** Prints the section (and records it when `record`); `bin` is the picogent whose
 * version the title gives, "-" for the source's (Cargo.toml). */
export function emit({ title, script, command, body, bin = "-", record = false }) {
  const argv = [join(here, "report.py"), "emit", "--title", title, "--script", script, "--command", command, "--bin", bin];
  if (record) argv.push("--record");
  const r = spawnSync("python3", argv, { input: body, stdio: ["pipe", "inherit", "inherit"] });
  if (r.error) throw r.error;
  if (r.status !== 0) throw new Error(`bench/report.py emit: exit ${r.status}`);
}
