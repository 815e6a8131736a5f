//! The two text formats `/metrics` speaks: OpenMetrics (what the registry writes, for a
//! scraper that asks for it in `Accept`) and Prometheus' text format 0.0.4 (the
//! default, what `promtool check metrics` and older scrapers read), where a counter's
//! family is named with its `_total` and there is no `# EOF`. Also the standard
//! `process_*` metrics, read from `/proc/self` when scraped.

/// OpenMetrics text turned into Prometheus text 0.0.4.
pub(super) fn to_prometheus_text(open: &str) -> String {
    let mut out = String::with_capacity(open.len());
    let lines: Vec<&str> = open.lines().collect();
    let mut i = 0;
    while let Some(line) = lines.get(i) {
        i += 1;
        if *line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        // A family: its HELP, then its TYPE; a counter's both take the `_total` name
        // its samples have.
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            let kind = lines
                .get(i)
                .and_then(|t| t.strip_prefix("# TYPE "))
                .and_then(|t| t.split_once(' '))
                .filter(|(n, _)| *n == name)
                .map(|(_, k)| k);
            let shown = match kind {
                Some("counter") if !name.ends_with("_total") => format!("{name}_total"),
                _ => name.to_string(),
            };
            out.push_str(&format!("# HELP {shown} {help}\n"));
            if let Some(kind) = kind {
                out.push_str(&format!("# TYPE {shown} {kind}\n"));
                i += 1;
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The standard process metrics (as the Prometheus client libraries name them), in
/// OpenMetrics text without its `# EOF`; empty where `/proc` cannot be read.
pub(super) fn process_metrics() -> String {
    let Some(stat) = std::fs::read_to_string("/proc/self/stat").ok() else {
        return String::new();
    };
    // The fields after the command name, which may hold spaces: from the last ')'.
    let Some(after) = stat.rsplit_once(')').map(|(_, a)| a) else {
        return String::new();
    };
    let f: Vec<&str> = after.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let (ticks, page) = crate::sandbox::sys::ticks_and_page();
    let ticks = if ticks > 0.0 { ticks } else { 100.0 };
    // Fields 14, 15 (utime, stime), 22 (starttime), 23 (vsize), 24 (rss), counted
    // from 1 with the pid and name: here from 0 after the name, so 11, 12, 19, 20, 21.
    let cpu = (num(11) + num(12)) / ticks;
    let start = boot_time() + num(19) / ticks;
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    let max_fds = crate::sandbox::sys::max_open_fds();
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, sample: &str, value: f64| {
        out.push_str(&format!(
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{sample} {value}\n"
        ));
    };
    family(
        "process_cpu_seconds",
        "counter",
        "Total user and system CPU time spent in seconds.",
        "process_cpu_seconds_total",
        cpu,
    );
    family(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
        "process_resident_memory_bytes",
        num(21) * page,
    );
    family(
        "process_virtual_memory_bytes",
        "gauge",
        "Virtual memory size in bytes.",
        "process_virtual_memory_bytes",
        num(20),
    );
    family(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since unix epoch in seconds.",
        "process_start_time_seconds",
        start,
    );
    family(
        "process_open_fds",
        "gauge",
        "Number of open file descriptors.",
        "process_open_fds",
        fds as f64,
    );
    family(
        "process_max_fds",
        "gauge",
        "Maximum number of open file descriptors.",
        "process_max_fds",
        max_fds,
    );
    out
}

/// When the machine booted, in seconds since the epoch (`btime` in `/proc/stat`); 0
/// when unknown.
fn boot_time() -> f64 {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every sample's family has HELP and TYPE under the name it is sampled by (a
    /// histogram's `_bucket`, `_sum` and `_count` belong to its name), no label value
    /// is empty, and no `# EOF` is left: what `promtool check metrics` asks.
    fn check_prometheus_text(text: &str) {
        let mut typed: Vec<(String, String)> = Vec::new();
        let mut helped: Vec<String> = Vec::new();
        for line in text.lines() {
            if let Some(r) = line.strip_prefix("# HELP ") {
                helped.push(r.split(' ').next().unwrap().to_string());
            } else if let Some(r) = line.strip_prefix("# TYPE ") {
                let (n, k) = r.split_once(' ').unwrap();
                typed.push((n.to_string(), k.to_string()));
            } else {
                assert!(!line.starts_with('#'), "{line}");
                let name = line.split(['{', ' ']).next().unwrap();
                let family = typed
                    .iter()
                    .find(|(n, k)| {
                        name == n
                            || (k == "histogram"
                                && ["_bucket", "_sum", "_count"]
                                    .iter()
                                    .any(|s| name == format!("{n}{s}")))
                    })
                    .unwrap_or_else(|| panic!("no TYPE for {name}: {text}"));
                assert!(helped.contains(&family.0), "no HELP for {name}");
                assert!(!line.contains("=\"\""), "an empty label value: {line}");
            }
        }
    }

    #[test]
    fn the_prometheus_text_names_every_family_as_its_samples_are_named() {
        super::super::run_finished("completed", None, 3);
        super::super::model_call(
            "anthropic",
            true,
            std::time::Duration::from_millis(5),
            None,
            None,
        );
        let text = to_prometheus_text(&super::super::render());
        assert!(
            text.contains("# TYPE picogent_runs_started_total counter"),
            "{text}"
        );
        assert!(text.contains("picogent_build_info{version="), "{text}");
        assert!(text.contains("process_resident_memory_bytes "), "{text}");
        assert!(!text.contains("# EOF"));
        check_prometheus_text(&text);
    }
}
