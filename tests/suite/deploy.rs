//! The deploy files as shipped: the Kubernetes manifest's and the Dockerfile's probes
//! are served by the binary started with the manifest's environment and transport.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::tracker::{FakeTracker, TOKEN};
use crate::common::*;

fn read(file: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap()
}

/// `path: /x` of every `httpGet` probe in the manifest.
fn probe_paths(manifest: &str) -> Vec<String> {
    let re = regex::Regex::new(r"httpGet:\s*\{path:\s*(/[\w/]*),\s*port:\s*http\}").unwrap();
    re.captures_iter(manifest)
        .map(|c| c[1].to_string())
        .collect()
}

#[tokio::test]
async fn the_manifests_probes_answer_with_its_transport_and_the_image_healthcheck_too() {
    let manifest = read("deploy/kubernetes.yaml");
    let dockerfile = read("deploy/Dockerfile");
    // What the manifest sets: the WebSocket transport, port 3200 named http.
    let transport = regex::Regex::new(r#"name: AGENT_TRANSPORT, value: "(\w+)""#)
        .unwrap()
        .captures(&manifest)
        .map(|c| c[1].to_string())
        .expect("the manifest sets AGENT_TRANSPORT");
    assert!(manifest.contains("containerPort: 3200, name: http"));
    assert!(
        !manifest.contains("kind: Secret"),
        "no placeholder Secret is applied"
    );
    let latest = regex::Regex::new(r"image:\s*\S+:latest").unwrap();
    assert!(!latest.is_match(&manifest), "the image tag is pinned");
    let mut paths = probe_paths(&manifest);
    assert_eq!(paths.len(), 2, "{paths:?}");
    let health = regex::Regex::new(r"127\.0\.0\.1:\$\{AGENT_PORT:-3200\}(/\w+)")
        .unwrap()
        .captures(&dockerfile)
        .map(|c| c[1].to_string())
        .expect("the Dockerfile has a HEALTHCHECK");
    paths.push(health);

    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let tracker = FakeTracker::start().await;
    let port = free_port();
    sb.write_config(&llm, Wire::Anthropic, json!({"allowed_paths": [sb.work]}));
    let _daemon = tokio::process::Command::new(env!("CARGO_BIN_EXE_picogent"))
        .arg(&sb.home)
        .current_dir(sb.base())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &sb.user_home)
        .env("AGENT_TOKEN", TOKEN)
        .env("PICOGENT_API_KEY", llm::API_KEY)
        .env("TRACKER_URL", tracker.url())
        .env("AGENT_TRANSPORT", &transport)
        .env("AGENT_PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    tracker
        .wait_for(20, "the agent registers", |t| !t.ws_frames().is_empty())
        .await;
    for path in paths {
        let url = format!("http://127.0.0.1:{port}{path}");
        let mut answer = None;
        for _ in 0..100 {
            if let Ok(r) = reqwest::get(&url).await {
                answer = Some((
                    r.status().as_u16(),
                    r.json::<Value>().await.unwrap_or_default(),
                ));
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (code, body) = answer.unwrap_or_else(|| panic!("nothing answers {url}"));
        assert_eq!(code, 200, "{path}: {body}");
    }
}

/// What systemd mounts over parts of `/proc` for the unit's settings, as shell
/// commands for a mount namespace of the test's own (where systemd is not PID 1, the
/// unit's hardening cannot be run as such; these are the mounts that decide whether a
/// command's PID namespace gets a `/proc` of its own).
fn proc_mounts_of(unit: &str) -> Vec<String> {
    let ro = |p: &str| {
        format!("[ ! -e {p} ] || {{ mount --bind {p} {p} && mount -o remount,bind,ro {p} {p}; }}")
    };
    let gone = |p: &str| format!("[ ! -e {p} ] || mount --bind /dev/null {p}");
    let mut out = Vec::new();
    for line in unit.lines().map(str::trim) {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let on = matches!(value, "yes" | "true" | "1" | "on");
        match key {
            "ProtectKernelTunables" if on => {
                for p in [
                    "/proc/sys",
                    "/proc/sysrq-trigger",
                    "/proc/irq",
                    "/proc/bus",
                    "/proc/fs",
                    "/proc/acpi",
                    "/proc/latency_stats",
                    "/proc/timer_stats",
                    "/proc/asound",
                ] {
                    out.push(ro(p));
                }
                out.extend(["/proc/kallsyms", "/proc/kcore"].map(gone));
            }
            "ProtectKernelLogs" if on => out.push(gone("/proc/kmsg")),
            "ProtectProc" if value != "default" => {
                out.push(format!("mount -t proc -o hidepid={value} proc /proc"))
            }
            "ProcSubset" if value == "pid" => {
                out.push("mount -t proc -o subset=pid proc /proc".into())
            }
            "ReadOnlyPaths" | "InaccessiblePaths" => {
                for p in value
                    .split_whitespace()
                    .map(|p| p.trim_start_matches(['-', '+']))
                {
                    if p.starts_with("/proc/") {
                        out.push(if key == "ReadOnlyPaths" {
                            ro(p)
                        } else {
                            gone(p)
                        });
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// `picogent sandbox-check` in a mount namespace with `mounts` made first: its answer.
fn sandbox_check_under(mounts: &[String]) -> String {
    let mut script = mounts.join(" && ");
    if script.is_empty() {
        script.push_str("true");
    }
    script.push_str(" && exec \"$0\" sandbox-check");
    let out = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .arg(env!("CARGO_BIN_EXE_picogent"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// The shipped unit's hardening keeps commands at the namespace level; the option it
/// leaves out for that reason really would lower it (so the simulation bites).
#[test]
fn the_systemd_units_hardening_keeps_the_namespace_level() {
    // SAFETY: a plain system call.
    if unsafe { libc::geteuid() } != 0 {
        return skip("a mount namespace of the test's own needs root");
    }
    if !namespaces_here() {
        return;
    }
    let unit = read("deploy/picogent@.service");
    for gone in [
        "ProtectKernelTunables=",
        "ProtectKernelLogs=",
        "RestrictNamespaces=",
        "PrivateUsers=",
    ] {
        assert!(
            !unit.lines().any(|l| l.starts_with(gone)),
            "{gone} lowers the level"
        );
    }
    let shipped = sandbox_check_under(&proc_mounts_of(&unit));
    assert!(shipped.contains("Level in force: namespaces"), "{shipped}");
    let tunables = format!("{unit}\nProtectKernelTunables=yes\n");
    let lowered = sandbox_check_under(&proc_mounts_of(&tunables));
    assert!(lowered.contains("Level in force: landlock"), "{lowered}");
    assert!(
        lowered.contains("ProtectKernelTunables="),
        "the hint names it: {lowered}"
    );
    let logs = sandbox_check_under(&proc_mounts_of("ProtectKernelLogs=yes"));
    assert!(logs.contains("Level in force: landlock"), "{logs}");
}
