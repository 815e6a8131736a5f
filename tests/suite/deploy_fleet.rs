//! The fleet's deploy files as shipped: the Kubernetes manifest validates strictly,
//! runs several replicas with a disruption budget, takes the database's URL from a
//! Secret, and its probes pass with its own configuration against a real PostgreSQL;
//! the systemd drop-in's password file is how the worker logs in.

use std::time::Duration;

use serde_json::Value;

use crate::common::tracker::FakeTracker;
use crate::common::*;

fn read(file: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap()
}

/// The ConfigMap's agent.json in the fleet manifest.
fn fleet_agent_json(manifest: &str) -> Value {
    let start = manifest
        .find("agent.json: |")
        .expect("the ConfigMap holds agent.json");
    let body: String = manifest[start..]
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("    "))
        .collect::<Vec<_>>()
        .join("\n");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("agent.json: {e}\n{body}"))
}

/// The binary on `sb` with the kit's environment and `env` (daemon.log its stderr).
fn spawn(sb: &Sandbox, env: &[(&str, String)]) -> tokio::process::Child {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    spawn_daemon_with(sb, &env)
}

#[test]
fn the_fleet_manifest_validates_strictly_and_scales() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/fleet.yaml");
    let out = std::process::Command::new("python3")
        .args(["-m", "kubernetes_validate", "--strict", "--quiet"])
        .arg(&path)
        .output()
        .expect("python3 with kubernetes-validate (scripts/test.sh installs it)");
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !said.contains("ERROR"), "{said}");
    let manifest = read("deploy/fleet.yaml");
    for needed in [
        "kind: Deployment",
        "replicas: 3",
        "kind: PodDisruptionBudget",
        "maxUnavailable: 1",
        "secretRef: {name: picogent-fleet}",
        "PICOGENT_STORE_URL=",
    ] {
        assert!(
            manifest.contains(needed),
            "deploy/fleet.yaml lacks {needed}"
        );
    }
    assert!(
        !manifest.contains("kind: Secret\n"),
        "no placeholder Secret is applied"
    );
    // The database's URL carries its password: from the Secret, never the ConfigMap.
    assert!(fleet_agent_json(&manifest).get("store").is_none());
    let single = read("deploy/kubernetes.yaml");
    assert!(single.contains("must stay at one replica"), "said in words");
}

/// Started as the manifest starts it (its agent.json, the store's URL as the Secret
/// gives it, the tracker's URL), each replica's readiness and liveness probes pass.
#[tokio::test]
async fn the_fleet_manifests_probes_pass_on_every_replica() {
    let manifest = read("deploy/fleet.yaml");
    let mut cfg = fleet_agent_json(&manifest);
    let probes: Vec<String> = regex::Regex::new(r"httpGet:\s*\{path:\s*(/\w+),\s*port:\s*http\}")
        .unwrap()
        .captures_iter(&manifest)
        .map(|c| c[1].to_string())
        .collect();
    assert_eq!(probes, ["/healthz", "/livez"]);
    let store = picogent_testkit::pg::database().await.url;
    let llm = ScriptedLlm::start(vec![]).await;
    let tracker = FakeTracker::start().await;
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let sb = Sandbox::new();
        let port = free_port();
        // The pod's paths and the Service's name become this machine's.
        cfg["work_dir"] = serde_json::json!(sb.work);
        cfg["allowed_paths"] = serde_json::json!([sb.work]);
        cfg["callback_url"] = serde_json::json!(format!("http://127.0.0.1:{port}/events"));
        cfg["provider"] = serde_json::json!("anthropic");
        cfg["base_url"] = serde_json::json!(llm.base_url(Wire::Anthropic));
        std::fs::write(sb.home.join("agent.json"), cfg.to_string()).unwrap();
        let child = spawn(
            &sb,
            &[
                ("PICOGENT_STORE_URL", store.clone()),
                ("TRACKER_URL", tracker.url()),
                ("AGENT_PORT", port.to_string()),
            ],
        );
        replicas.push((sb, port, child));
    }
    for (sb, port, _) in &replicas {
        for path in &probes {
            let mut last = (0, Value::Null);
            for _ in 0..250 {
                last = get_when_up(*port, path).await;
                if last.0 == 200 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let log = std::fs::read_to_string(sb.base().join("daemon.log")).unwrap_or_default();
            assert_eq!(last.0, 200, "{path}: {}\n{log}", last.1);
        }
        let (_, health) = get_when_up(*port, "/healthz").await;
        assert_eq!(health["fleet"]["store"]["reachable"], true, "{health}");
    }
}

/// The systemd drop-in hands the password over as a credential file
/// (`PICOGENT_STORE_PASSWORD_FILE`): a URL without one logs in with it, and a wrong
/// one is a clear error at start that shows no password.
#[tokio::test]
async fn the_systemd_drop_in_logs_in_with_the_password_file() {
    let dropin = read("deploy/fleet.conf");
    assert!(dropin.contains("LoadCredential=store-password:"));
    assert!(dropin.contains("Environment=PICOGENT_STORE_PASSWORD_FILE=%d/store-password"));
    let url = picogent_testkit::pg::database().await.url;
    let (before, after) = url.split_once('@').unwrap();
    let (user_part, password) = before.rsplit_once(':').unwrap();
    let bare = format!("{user_part}@{after}");
    let llm = ScriptedLlm::start(vec![]).await;
    let tracker = FakeTracker::start().await;
    for (pw, works) in [(password.to_string(), true), ("not-it".to_string(), false)] {
        let sb = Sandbox::new();
        let port = free_port();
        let creds = sb.base().join("credentials");
        std::fs::create_dir(&creds).unwrap();
        std::fs::write(creds.join("store-password"), format!("{pw}\n")).unwrap();
        sb.write_config(
            &llm,
            Wire::Anthropic,
            serde_json::json!({"allowed_paths": [sb.work]}),
        );
        let mut child = spawn(
            &sb,
            &[
                ("PICOGENT_STORE_URL", bare.clone()),
                (
                    "PICOGENT_STORE_PASSWORD_FILE",
                    creds.join("store-password").display().to_string(),
                ),
                ("TRACKER_URL", tracker.url()),
                ("AGENT_PORT", port.to_string()),
                (
                    "AGENT_CALLBACK_URL",
                    format!("http://127.0.0.1:{port}/events"),
                ),
            ],
        );
        let log = || std::fs::read_to_string(sb.base().join("daemon.log")).unwrap_or_default();
        if works {
            let (code, health) = get_when_up(port, "/livez").await;
            assert_eq!(code, 200, "{health}\n{}", log());
            assert!(log().contains("a fleet's worker"), "{}", log());
            child.kill().await.unwrap();
        } else {
            let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
                .await
                .expect("a refused login ends the start")
                .unwrap();
            assert!(!status.success());
            let said = log();
            assert!(said.contains("the store (postgres://picogent@"), "{said}");
            assert!(said.contains("password authentication failed"), "{said}");
            assert!(
                !said.contains(password) && !said.contains("not-it"),
                "{said}"
            );
        }
    }
}
