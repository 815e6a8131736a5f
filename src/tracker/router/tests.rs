//! A job that ends without freeing its task (a panic, a bug) must not leave the task
//! marked running forever: its later jobs run, and a shutdown does not wait for it.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{lock, Ended, Job, JobKind, Router, Running};
use crate::tracker::journal::Journal;
use crate::tracker::journal_writer::JournalWriter;
use crate::tracker::outbox::Outbox;
use crate::tracker::types::TaskId;

/// A router over a real agent folder (its model unreachable: no job here gets far).
fn router(dir: &std::path::Path) -> Router {
    let home = dir.join("agent");
    std::fs::create_dir_all(home.join("work")).unwrap();
    std::fs::write(
        home.join("agent.json"),
        r#"{"provider": "ollama", "model": "m", "base_url": "http://127.0.0.1:9", "work_dir": "work", "tracker_url": "http://127.0.0.1:9"}"#,
    )
    .unwrap();
    let env = crate::config::Env::from_pairs([("HOME", dir.display().to_string())]);
    let config = crate::config::Config::load(Some(&home), &env, dir).unwrap();
    let state = config.state_dir();
    std::fs::create_dir_all(&state).unwrap();
    let agent = crate::agent::Agent::new(config).unwrap();
    let journal = JournalWriter::start(Journal::open(&state).unwrap()).unwrap();
    let board = crate::tracker::TrackerClient::new("http://127.0.0.1:9", "t").unwrap();
    let tracker = std::sync::Arc::new(board);
    let shared = crate::tracker::worktree::Workspace::Shared(None);
    Router::new(
        agent,
        journal,
        Outbox::open(&state).unwrap(),
        shared,
        tracker,
    )
}

fn tid(id: &str) -> TaskId {
    TaskId::new(id).unwrap()
}

fn job(event: &str, task: &str) -> Job {
    Job {
        event_id: event.into(),
        task_id: tid(task),
        kind: JobKind::Task {
            title: "Do it".into(),
            description: String::new(),
        },
    }
}

#[tokio::test]
async fn a_job_that_panics_frees_its_task_and_the_next_job_of_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let r = router(dir.path());
    // A job of task t is running; another job of t waits behind it.
    {
        let mut st = lock(&r.shared.state);
        let running = Running {
            cancel: CancellationToken::new(),
            why: None,
            control: None,
        };
        st.running.insert(tid("t"), running);
        st.queue.push_back(job("e2", "t"));
    }
    let ended = Ended {
        router: r.clone(),
        task: tid("t"),
        armed: true,
    };
    let crashed = r.shared.tasks.spawn(async move {
        let _ended = ended;
        panic!("a bug in a job");
    });
    assert!(crashed.await.unwrap_err().is_panic());
    // The guard freed t and started the job waiting behind it.
    {
        let st = lock(&r.shared.state);
        assert!(
            st.queue.is_empty(),
            "the next job of the task never started"
        );
        assert!(st.running.contains_key("t"));
    }
    // A shutdown ends the new job (cancelled) and returns: nothing waits for the
    // one that panicked.
    tokio::time::timeout(
        Duration::from_secs(30),
        r.shutdown(Duration::from_millis(100)),
    )
    .await
    .expect("the shutdown waited for a job that had ended");
    assert!(lock(&r.shared.state).running.is_empty());
}
