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

/// `/healthz` of an agent on `port`, once it answers (at most 10 s).
async fn health_on(port: u16) -> (u16, Value) {
    get_when_up(port, "/healthz").await
}

fn concern_kinds(body: &Value, field: &str) -> Vec<String> {
    body[field]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["kind"].as_str().map(str::to_string))
        .collect()
}

/// An agent that never registered takes no tasks: its `/healthz` says so (503, for a
/// readiness probe) instead of `ok`, over either transport, until it registers.
#[tokio::test]
async fn an_agent_that_never_registered_says_so_in_healthz() {
    for transport in ["ws", "http"] {
        let sb = Sandbox::new();
        let llm = ScriptedLlm::start(vec![]).await;
        let port = free_port();
        // Nothing listens on port 9.
        let dead = FakeTracker::start_on("127.0.0.1:0").await;
        let mut extra = json!({"transport": transport, "listen_port": port, "tracker_url": "http://127.0.0.1:9"});
        if transport == "http" {
            extra["callback_url"] = json!(format!("http://127.0.0.1:{port}/events"));
        }
        let d = sb.daemon(&llm, &dead, extra);
        let (code, body) = loop {
            let (code, body) = health_on(port).await;
            if body.get("reasons").is_some() {
                break (code, body);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(code, 503, "{transport}: {body}");
        assert_eq!(body["status"], "degraded", "{transport}: {body}");
        assert!(
            concern_kinds(&body, "reasons").contains(&"not_registered".to_string()),
            "{transport}: {body}"
        );
        assert!(
            body["reason"]
                .as_str()
                .unwrap()
                .contains("not registered with the tracker"),
            "{body}"
        );
        d.stop().await.unwrap();
    }
}

/// Two processes with one slug against one tracker take the slug from each other (the
/// tracker keeps one connection per agent): each notices, in its log and `/healthz`.
#[tokio::test]
async fn a_second_process_with_the_same_slug_is_noticed_by_both() {
    let tracker = FakeTracker::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    let (a, b) = (Sandbox::new(), Sandbox::new());
    let (pa, pb) = (free_port(), free_port());
    let da = a.daemon(
        &llm,
        &tracker,
        json!({"transport": "ws", "listen_port": pa}),
    );
    let db = b.daemon(
        &llm,
        &tracker,
        json!({"transport": "ws", "listen_port": pb}),
    );
    for port in [pa, pb] {
        let mut seen = None;
        for _ in 0..1500 {
            let (_, body) = health_on(port).await;
            if concern_kinds(&body, "warning_details").contains(&"slug_contended".to_string()) {
                seen = Some(body);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let body = seen.unwrap_or_else(|| panic!("the agent on {port} never noticed"));
        let words = body["warnings"].to_string();
        assert!(
            words.contains("`test`") && words.contains("one picogent per agent identity"),
            "{words}"
        );
    }
    da.stop().await.unwrap();
    db.stop().await.unwrap();
}

/// `kubernetes-validate --strict` on a manifest: whether it passed, and what it said.
fn validate_strictly(manifest: &std::path::Path) -> (bool, String) {
    let out = std::process::Command::new("python3")
        .args(["-m", "kubernetes_validate", "--strict", "--quiet"])
        .arg(manifest)
        .output()
        .expect("python3 with kubernetes-validate (scripts/test.sh installs it)");
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!said.contains("No module named"), "{said}");
    (out.status.success() && !said.contains("ERROR"), said)
}

/// The manifest validates strictly against Kubernetes' own schemas (an unknown field
/// fails, which the check is shown to catch), and says in words that it runs one
/// replica per agent identity.
#[test]
fn the_kubernetes_manifest_validates_strictly_and_runs_one_replica_per_identity() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes.yaml");
    let (ok, said) = validate_strictly(&path);
    assert!(ok, "{said}");
    let manifest = read("deploy/kubernetes.yaml");
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        manifest.replace("  replicas: 1\n", "  replicas: 1\n  replicaz: 1\n"),
    )
    .unwrap();
    let (ok, said) = validate_strictly(&bad);
    assert!(!ok && said.contains("replicaz"), "{said}");
    assert!(manifest.contains("replicas: 1"));
    assert!(
        manifest.contains("one replica per agent identity"),
        "said in words"
    );
}

/// The image's dependency layer builds the workspace from stubs: every crate under
/// `crates/` has its manifest copied and its `lib.rs` stubbed there (cargo refuses a
/// workspace with a member it cannot load), and its source copied after.
#[test]
fn the_dockerfile_stubs_every_workspace_crate() {
    let dockerfile = read("deploy/Dockerfile");
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut names: Vec<String> = std::fs::read_dir(crates)
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("Cargo.toml").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 3, "{names:?}");
    for name in &names {
        for needed in [
            format!("COPY crates/{name}/Cargo.toml crates/{name}/"),
            format!("crates/{name}/src/lib.rs"),
        ] {
            assert!(
                dockerfile.contains(&needed),
                "deploy/Dockerfile lacks `{needed}`"
            );
        }
    }
    assert!(dockerfile.contains("COPY crates ./crates"));
}
