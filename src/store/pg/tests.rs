//! The PostgreSQL store against a real server (scripts/pg.sh), a database per test.

use std::sync::Arc;
use std::time::Duration;

use picogent_protocol::tracker::{Arrival, Event, Origin, Report, Task, TaskId};

use super::{Pg, StoreError, SCHEMA_VERSION};

fn arrival(id: &str, task: &str) -> Arrival {
    Arrival {
        id: id.into(),
        event: Event::TaskAssigned {
            task: Task {
                id: TaskId::new(task).unwrap(),
                title: "x".into(),
                description: None,
            },
        },
        origin: Origin::Board { created_at: None },
    }
}

fn target(url: &str) -> crate::config::Postgres {
    crate::config::Postgres {
        config: url.parse().unwrap(),
        ca_file: None,
    }
}

async fn open(url: &str, worker: &str) -> Arc<Pg> {
    Pg::open(&target(url), worker.into()).await.unwrap()
}

async fn fresh() -> (String, Arc<Pg>) {
    let db = picogent_testkit::pg::database().await;
    let pg = open(&db.url, "w1").await;
    (db.url, pg)
}

const LEASE: Duration = Duration::from_secs(30);

#[tokio::test]
async fn migrations_apply_once_and_a_newer_schema_is_refused() {
    let db = picogent_testkit::pg::database().await;
    // Workers starting together: one migrates, the others find it done.
    let opens: Vec<_> = (0..4)
        .map(|n| {
            let url = db.url.clone();
            tokio::spawn(async move { Pg::open(&target(&url), format!("w{n}")).await })
        })
        .collect();
    for o in opens {
        o.await.unwrap().unwrap();
    }
    let pg = open(&db.url, "w").await;
    let version = pg
        .run(|c| async move {
            c.query_one("SELECT count(*), max(version) FROM picogent_schema", &[])
                .await
        })
        .await
        .unwrap();
    assert_eq!(version.get::<_, i64>(0), 1);
    assert_eq!(version.get::<_, Option<i32>>(1), Some(SCHEMA_VERSION));
    let newer = SCHEMA_VERSION + 1;
    pg.run(|c| async move {
        c.execute("UPDATE picogent_schema SET version = $1", &[&newer])
            .await
    })
    .await
    .unwrap();
    let Err(e) = Pg::open(&target(&db.url), "old".into()).await else {
        panic!("a newer schema was accepted");
    };
    assert!(
        matches!(e, StoreError::TooNew { found, known } if found == newer && known == SCHEMA_VERSION)
    );
    assert!(e.to_string().contains("upgrade picogent"), "{e}");
}

#[tokio::test]
async fn an_event_accepted_by_many_workers_at_once_is_new_once() {
    let (url, _) = fresh().await;
    let mut workers = Vec::new();
    for n in 0..3 {
        workers.push(open(&url, &format!("w{n}")).await);
    }
    let mut tries = Vec::new();
    for round in 0..20 {
        for w in &workers {
            let w = w.clone();
            tries.push(tokio::spawn(async move {
                w.accept(&arrival(&format!("e{round}"), &format!("t{round}")))
                    .await
                    .unwrap()
            }));
        }
    }
    let mut new = 0;
    for t in tries {
        new += usize::from(t.await.unwrap());
    }
    assert_eq!(new, 20);
    assert!(workers[1].is_seen("e7").await.unwrap());
    assert!(!workers[1].is_seen("e99").await.unwrap());
}

#[tokio::test]
async fn a_task_is_claimed_by_one_worker_and_its_events_come_in_order() {
    let (url, a) = fresh().await;
    let b = open(&url, "w2").await;
    for (id, task) in [("e1", "t1"), ("e2", "t2"), ("e3", "t1")] {
        a.accept(&arrival(id, task)).await.unwrap();
    }
    let (ca, cb) = tokio::join!(a.claim(1, LEASE, None), b.claim(5, LEASE, None));
    let (ca, cb) = (ca.unwrap(), cb.unwrap());
    let mut all: Vec<String> = ca.iter().chain(&cb).map(|t| t.to_string()).collect();
    all.sort();
    assert_eq!(all, ["t1", "t2"], "each task claimed once");
    let holder = if ca.iter().any(|t| t.as_str() == "t1") {
        &a
    } else {
        &b
    };
    let ids: Vec<String> = holder
        .pending_of_held()
        .await
        .unwrap()
        .into_iter()
        .filter(|c| c.task_id().as_str() == "t1")
        .map(|c| c.id)
        .collect();
    assert_eq!(ids, ["e1", "e3"]);
    // Nothing is left to claim while the leases live.
    assert!(a.claim(5, LEASE, None).await.unwrap().is_empty());
    assert!(b.claim(5, LEASE, None).await.unwrap().is_empty());
}

#[tokio::test]
async fn fleet_max_tasks_holds_across_workers() {
    let (url, a) = fresh().await;
    let b = open(&url, "w2").await;
    for n in 0..6 {
        a.accept(&arrival(&format!("e{n}"), &format!("t{n}")))
            .await
            .unwrap();
    }
    let (ca, cb) = tokio::join!(a.claim(3, LEASE, Some(4)), b.claim(3, LEASE, Some(4)));
    assert_eq!(ca.unwrap().len() + cb.unwrap().len(), 4);
    assert_eq!(a.fleet_status().await.unwrap().queued_tasks, 2);
}

#[tokio::test]
async fn an_expired_lease_moves_on_and_its_old_holder_can_neither_conclude_nor_renew() {
    let (url, a) = fresh().await;
    let b = open(&url, "w2").await;
    a.accept(&arrival("e1", "t1")).await.unwrap();
    let short = Duration::from_millis(300);
    assert_eq!(a.claim(1, short, None).await.unwrap().len(), 1);
    // Not before it runs out.
    assert!(b.claim(1, LEASE, None).await.unwrap().is_empty());
    tokio::time::sleep(Duration::from_millis(400)).await;
    let taken = b.claim(1, LEASE, None).await.unwrap();
    assert_eq!(taken.len(), 1);
    let t1 = TaskId::new("t1").unwrap();
    let report = [Report::comment("late".to_string(), None)];
    let refused = a.push(&t1, &report, &["e1".into()]).await;
    assert!(
        matches!(refused, Err(StoreError::LeaseLost(_))),
        "{refused:?}"
    );
    assert_eq!(b.fleet_status().await.unwrap().lease_expiries, 1);
    // The new holder concludes it; the old one finds it lost.
    b.push(&t1, &report, &["e1".into()]).await.unwrap();
    assert!(b.pending_of_held().await.unwrap().is_empty());
    assert_eq!(a.renew(LEASE).await.unwrap(), Vec::<String>::new());
    assert_eq!(a.report_counts().await.unwrap(), (1, 0));
}

#[tokio::test]
async fn renewing_finds_a_lease_another_worker_took() {
    let (url, a) = fresh().await;
    let b = open(&url, "w2").await;
    a.accept(&arrival("e1", "t1")).await.unwrap();
    a.claim(1, Duration::from_millis(200), None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(b.claim(1, LEASE, None).await.unwrap().len(), 1);
    assert_eq!(a.renew(LEASE).await.unwrap(), ["t1"]);
    assert!(a.fence("t1").is_none());
    assert!(b.renew(LEASE).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_released_task_with_new_events_is_claimed_again() {
    let (url, a) = fresh().await;
    let b = open(&url, "w2").await;
    let t1 = TaskId::new("t1").unwrap();
    a.accept(&arrival("e1", "t1")).await.unwrap();
    a.claim(1, LEASE, None).await.unwrap();
    a.push(&t1, &[], &["e1".into()]).await.unwrap();
    b.accept(&arrival("e2", "t1")).await.unwrap();
    a.release(&t1).await.unwrap();
    assert_eq!(
        b.claim(2, LEASE, None).await.unwrap(),
        std::slice::from_ref(&t1)
    );
    let ids: Vec<_> = b
        .pending_of_held()
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(ids, ["e2"]);
    assert_eq!(b.started("e2").await.unwrap(), 1);
    assert_eq!(b.started("e2").await.unwrap(), 2);
}

#[tokio::test]
async fn a_tasks_reports_go_out_in_order_one_deliverer_at_a_time() {
    let (url, a) = fresh().await;
    let b = open(&url, "w2").await;
    let (t1, t2) = (TaskId::new("t1").unwrap(), TaskId::new("t2").unwrap());
    for (id, t) in [("e1", &t1), ("e2", &t2)] {
        a.accept(&arrival(id, t.as_str())).await.unwrap();
    }
    a.claim(2, LEASE, None).await.unwrap();
    let comments = |n: usize| -> Vec<Report> {
        (0..n)
            .map(|i| Report::comment(format!("c{i}"), None))
            .collect()
    };
    a.push(&t1, &comments(3), &["e1".into()]).await.unwrap();
    a.push(&t2, &comments(1), &["e2".into()]).await.unwrap();
    let hold = Duration::from_secs(30);
    let (ra, rb) = tokio::join!(a.claim_reports(8, &[], hold), b.claim_reports(8, &[], hold));
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert_eq!(ra.len() + rb.len(), 2, "one report per task: {ra:?} {rb:?}");
    let first_t1 = ra
        .iter()
        .chain(&rb)
        .find(|q| q.task_id == t1)
        .unwrap()
        .clone();
    assert_eq!(first_t1.report, Report::comment("c0".to_string(), None));
    // Its next report waits until the first is sent: no worker, with its own lanes
    // busy, gets another.
    let lanes = ["t1".to_string(), "t2".to_string()];
    assert!(a.claim_reports(8, &lanes, hold).await.unwrap().is_empty());
    assert!(b.claim_reports(8, &lanes, hold).await.unwrap().is_empty());
    // A worker's own claim outside its lanes is stale (a lane that ended without
    // recording the report): taken again, by it alone.
    let mut mine: Vec<i64> = ra.iter().map(|q| q.seq).collect();
    let mut again: Vec<i64> = a
        .claim_reports(8, &[], hold)
        .await
        .unwrap()
        .iter()
        .map(|q| q.seq)
        .collect();
    mine.sort();
    again.sort();
    assert_eq!(again, mine);
    a.sent(first_t1.seq).await.unwrap();
    // (Its lane for t2 busy: a claim of its own there is not stale.)
    let next = b.claim_reports(8, &["t2".to_string()], hold).await.unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].report, Report::comment("c1".to_string(), None));
    assert!(
        !a.hold_report(next[0].seq, hold).await.unwrap(),
        "another worker's claim"
    );
    assert!(b.hold_report(next[0].seq, hold).await.unwrap());
    b.bury(&next[0], "410 gone").await.unwrap();
    assert_eq!(a.report_counts().await.unwrap(), (2, 1));
}

#[tokio::test]
async fn a_report_claim_that_runs_out_is_taken_by_another_worker() {
    let (url, a) = fresh().await;
    let b = open(&url, "w2").await;
    let t1 = TaskId::new("t1").unwrap();
    a.accept(&arrival("e1", "t1")).await.unwrap();
    a.claim(1, LEASE, None).await.unwrap();
    a.push(&t1, &[Report::comment("c".to_string(), None)], &[])
        .await
        .unwrap();
    let first = a
        .claim_reports(1, &[], Duration::from_millis(200))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = b.claim_reports(1, &[], LEASE).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].key, first[0].key, "the same idempotency key");
}

#[tokio::test]
async fn an_unreachable_store_is_a_transient_error_not_a_hang() {
    let pg = open(&picogent_testkit::pg::database().await.url, "w").await;
    // A port nothing listens on.
    let Err(e) = Pg::open(&target("postgres://u:p@127.0.0.1:1/db"), "w".into()).await else {
        panic!("connected to nothing");
    };
    assert!(e.is_transient(), "{e}");
    assert!(pg.health.lock().unwrap().failing.is_none());
}

#[tokio::test]
async fn a_role_is_one_workers_until_its_lease_runs_out_or_it_resigns() {
    let (url, a) = fresh().await;
    let b = open(&url, "w2").await;
    let short = Duration::from_millis(300);
    assert!(a.lead("r", short).await.unwrap());
    assert!(!b.lead("r", short).await.unwrap());
    assert!(a.lead("r", short).await.unwrap(), "renewed by its holder");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(b.lead("r", LEASE).await.unwrap(), "taken once it ran out");
    assert!(!a.lead("r", LEASE).await.unwrap());
    b.resign("r").await.unwrap();
    assert!(
        a.lead("r", LEASE).await.unwrap(),
        "free at once after a resignation"
    );
}

/// TLS as the URL's `sslmode` asks, the server's certificate checked against the CA
/// file: used when the server offers it, refused when nothing vouches for it.
#[tokio::test]
async fn tls_follows_sslmode_and_checks_the_servers_certificate() {
    let cluster = picogent_testkit::pg::Cluster::start_tls();
    let db = cluster.database().await.url;
    let ca = cluster.ca.clone();
    let with = |url: String, ca_file: Option<std::path::PathBuf>| crate::config::Postgres {
        config: url.parse().unwrap(),
        ca_file,
    };
    let uses_tls = |pg: Arc<Pg>| async move {
        pg.run(|c| async move {
            c.query_one(
                "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                &[],
            )
            .await
        })
        .await
        .unwrap()
        .get::<_, bool>(0)
    };
    for url in [format!("{db}?sslmode=require"), db.clone()] {
        let pg = Pg::open(&with(url.clone(), ca.clone()), "w".into())
            .await
            .unwrap();
        assert!(uses_tls(pg).await, "{url}");
    }
    let Err(e) = Pg::open(&with(format!("{db}?sslmode=require"), None), "w".into()).await else {
        panic!("a certificate nothing vouches for was taken");
    };
    assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
    let pg = Pg::open(&with(format!("{db}?sslmode=disable"), None), "w".into())
        .await
        .unwrap();
    assert!(!uses_tls(pg).await);
    let bad = std::env::temp_dir().join(format!("not-a-ca-{}", std::process::id()));
    std::fs::write(&bad, "no certificate here").unwrap();
    let Err(e) = Pg::open(&with(db, Some(bad.clone())), "w".into()).await else {
        panic!("a CA file without certificates was taken");
    };
    assert!(e.to_string().contains(&bad.display().to_string()), "{e}");
}

/// Renewing finds exactly the leases lost, each judged by its own fence.
#[tokio::test]
async fn renewing_loses_only_the_leases_another_worker_took() {
    let (_, a) = fresh().await;
    for (id, task) in [("e1", "t1"), ("e2", "t2")] {
        a.accept(&arrival(id, task)).await.unwrap();
    }
    assert_eq!(a.claim(2, LEASE, None).await.unwrap().len(), 2);
    // t2 claimed again later (a higher fence); t1 taken by another worker since.
    a.run(|c| async move {
        c.batch_execute(
            "UPDATE tasks SET fence = 5 WHERE task_id = 't2';
             UPDATE tasks SET owner = 'w2', fence = fence + 1 WHERE task_id = 't1'",
        )
        .await
    })
    .await
    .unwrap();
    a.held.lock().unwrap().insert("t2".into(), 5);
    assert_eq!(a.renew(LEASE).await.unwrap(), ["t1"]);
    assert_eq!((a.fence("t1"), a.fence("t2")), (None, Some(5)));
    assert!(a.renew(LEASE).await.unwrap().is_empty());
}

/// A decision holds its repository's lock until it commits: another worker's waits,
/// then reads what the first wrote; one dropped unfinished leaves nothing (its event
/// and its entry roll back together).
#[tokio::test]
async fn github_decisions_take_turns_and_a_dropped_one_leaves_nothing() {
    use super::Which;
    use crate::store::issues::Entry;
    let (url, a) = fresh().await;
    let b = open(&url, "w2").await;
    let first = a.github_lock("acme/api").await.unwrap();
    assert!(first
        .accept(&arrival("e1", "acme:api:issue-1"))
        .await
        .unwrap());
    let active = Entry {
        active: true,
        generation: 1,
        ..Entry::default()
    };
    first.put(1, &active).await.unwrap();
    // Another repository's decisions do not wait.
    let other = b.github_lock("acme/web").await.unwrap();
    other.commit().await.unwrap();
    let waiting = tokio::spawn({
        let b = b.clone();
        async move {
            let second = b.github_lock("acme/api").await.unwrap();
            let seen = second.entries(Which::Issues(&[1])).await.unwrap();
            let again = second
                .accept(&arrival("e1", "acme:api:issue-1"))
                .await
                .unwrap();
            second.commit().await.unwrap();
            (seen, again)
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "the second decision waits for the first"
    );
    first.commit().await.unwrap();
    let (seen, again) = waiting.await.unwrap();
    assert_eq!(seen, vec![(1, active.clone())]);
    assert!(!again, "the event is the first decision's");

    let dropped = a.github_lock("acme/api").await.unwrap();
    assert!(dropped
        .accept(&arrival("e2", "acme:api:issue-2"))
        .await
        .unwrap());
    dropped.put(2, &active).await.unwrap();
    drop(dropped);
    let after = b.github_lock("acme/api").await.unwrap();
    assert!(after.entries(Which::Issues(&[2])).await.unwrap().is_empty());
    assert!(after
        .accept(&arrival("e2", "acme:api:issue-2"))
        .await
        .unwrap());
    after.commit().await.unwrap();
    // The open entries, and an entry found by its pull request.
    let mut pulled = active.clone();
    pulled.pull = Some(9);
    let l = a.github_lock("acme/api").await.unwrap();
    l.put(3, &pulled).await.unwrap();
    l.commit().await.unwrap();
    let open_now = a.github_entries("acme/api", Which::Open).await.unwrap();
    assert_eq!(open_now.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1, 3]);
    let by_pull = a.github_entries("acme/api", Which::Pull(9)).await.unwrap();
    assert_eq!(by_pull, vec![(3, pulled)]);
}

/// Marks only move forward; a token's spent window is the fleet's until a later one.
#[tokio::test]
async fn github_marks_and_rate_windows_are_shared() {
    use super::RateWindow;
    let (url, a) = fresh().await;
    let b = open(&url, "w2").await;
    a.github_set_mark("acme/api", "/issues", "2026-01-02T00:00:00Z")
        .await
        .unwrap();
    b.github_set_mark("acme/api", "/issues", "2026-01-01T00:00:00Z")
        .await
        .unwrap();
    assert_eq!(
        a.github_marks("acme/api").await.unwrap(),
        [("/issues".to_string(), "2026-01-02T00:00:00Z".to_string())]
    );
    let w = |remaining, reset| RateWindow {
        limit: 5000,
        remaining,
        reset,
    };
    a.rate_note("t", w(4000, 100)).await.unwrap();
    b.rate_note("t", w(4100, 100)).await.unwrap();
    assert_eq!(b.rate_read("t").await.unwrap(), Some(w(4000, 100)));
    a.rate_note("t", w(0, 60)).await.unwrap();
    assert_eq!(b.rate_read("t").await.unwrap(), Some(w(0, 60)));
    b.rate_note("t", w(4999, 200)).await.unwrap();
    assert_eq!(a.rate_read("t").await.unwrap(), Some(w(4999, 200)));
    assert_eq!(a.rate_read("other").await.unwrap(), None);
}
