//! What `/healthz` says about agent mode: the promises the daemon cannot keep right
//! now (`degraded`: a supervisor should look) and what a person should know
//! (`warnings`), each with a kind a program can match and a sentence a person reads.

use serde::Serialize;

use crate::config::SandboxMode;
use crate::sandbox::confine::LevelInForce;
use crate::tracker::router::Router;

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Concern {
    pub(crate) kind: &'static str,
    pub(crate) message: String,
}

fn concern(kind: &'static str, message: String) -> Concern {
    Concern { kind, message }
}

pub(crate) struct Health {
    pub(crate) degraded: Vec<Concern>,
    pub(crate) warnings: Vec<Concern>,
}

/// Looks at the daemon now.
pub(crate) fn assess(router: &Router) -> Health {
    let mut degraded = Vec::new();
    if let Some(why) = router.results_waiting() {
        degraded.push(concern("reports_not_queued", why));
    }
    if let Some(why) = router.journal_refusing() {
        degraded.push(concern(
            "journal_refusing",
            format!("new events are refused (they cannot be recorded): {why}"),
        ));
    }
    if let Some(why) = router.runs_waiting_for_room() {
        degraded.push(concern("disk_full", why));
    }
    if let Some(why) = router.fleet().and_then(|f| f.failing) {
        degraded.push(concern(
            "store_unreachable",
            format!("the fleet's store is not answering ({why}): no new tasks are claimed, running tasks go on, their reports wait"),
        ));
    }
    if let Some(why) = router.link().not_registered() {
        degraded.push(concern("not_registered", why));
    }
    let waiting = router.backlog();
    if let Some(why) = router.tracker_failing().filter(|_| waiting > 0) {
        degraded.push(concern(
            "tracker_unreachable",
            format!("the tracker is not taking reports ({why}); {waiting} waiting"),
        ));
    }
    if let Some(why) = router.tracker_refusing().filter(|_| waiting > 0) {
        degraded.push(concern(
            "reports_refused",
            format!("the tracker refuses reports ({why}); {waiting} waiting, retried for a while, then kept in the dead-letter file"),
        ));
    }
    Health {
        degraded,
        warnings: warnings(router),
    }
}

/// `/healthz`'s `fleet`: this worker, its store, and the fleet as last seen.
pub(crate) fn fleet_json(f: &crate::tracker::router::FleetView) -> serde_json::Value {
    let mut v = serde_json::json!({
        "worker": f.worker,
        "leases_held": f.held,
        "store": {
            "reachable": f.failing.is_none(),
            "round_trip_ms": f.round_trip.map(|d| d.as_secs_f64() * 1000.0),
        },
    });
    if let Some(s) = &f.status {
        v["queued_tasks"] = serde_json::json!(s.queued_tasks);
        v["oldest_queued_sec"] = serde_json::json!(s.oldest_queued.map(|d| d.as_secs()));
        v["leases"] = serde_json::json!(s.leases);
        v["lease_expiries"] = serde_json::json!(s.lease_expiries);
    }
    v
}

fn warnings(router: &Router) -> Vec<Concern> {
    let mut w = Vec::new();
    // A kernel without user namespaces (a container) is what `on` falls back from, not
    // a fault a restart would mend: said, but the answer stays 200.
    let (mode, level) = router.sandbox();
    let weaker = match mode {
        SandboxMode::On => level != LevelInForce::Namespaces,
        SandboxMode::Landlock => level == LevelInForce::Off,
        SandboxMode::Off => false,
    };
    if weaker {
        w.push(concern(
            "sandbox_weaker",
            format!(
                "commands run at sandbox level `{}`, weaker than `sandbox` asks for (see `picogent sandbox-check`)",
                level.as_str()
            ),
        ));
    }

    if let Some(why) = router.link().contended() {
        w.push(concern("slug_contended", why));
    }

    let state = router.state_dir();
    if let Ok((free, total)) = crate::tools::bash::capture::disk_space(&state) {
        if crate::tools::bash::capture::too_full_to_save(free, total) {
            w.push(concern(
                "state_disk_low",
                format!(
                    "the state disk is nearly full ({} MB free of {} MB): new outputs are not saved, and the journal and outbox may soon refuse",
                    free >> 20,
                    total >> 20
                ),
            ));
        }
    }
    let (dead, file) = router.dead_letters();
    if dead > 0 {
        w.push(concern(
            "dead_letters",
            format!(
                "{dead} report(s) the tracker refused for good are kept in {}",
                file.display()
            ),
        ));
    }
    w
}
