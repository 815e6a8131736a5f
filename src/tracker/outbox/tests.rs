use super::*;
use crate::tracker::types::TaskStatus;

impl Outbox {
    async fn push(&self, task_id: &TaskId, reports: Vec<Report>) -> Result<(), QueueError> {
        self.push_concluding(task_id, reports, Vec::new()).await
    }

    fn files(&self) -> &files::Files {
        match &self.queue {
            Queue::Files(f) => f,
            Queue::Fleet { .. } => panic!("a fleet's outbox"),
        }
    }
}

fn tid(id: impl Into<String>) -> TaskId {
    TaskId::new(id).unwrap()
}

fn contents(o: &Outbox) -> Vec<(TaskId, Report)> {
    let s = o.files().lock();
    s.items
        .iter()
        .map(|i| (i.task_id.clone(), i.report.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pushes_keep_each_tasks_order_and_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = Outbox::open(dir.path()).unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let o = outbox.clone();
            tokio::spawn(async move {
                for i in 0..20 {
                    let r = vec![
                        Report::comment(format!("{i}"), None),
                        Report::status(TaskStatus::Review),
                    ];
                    o.push(&tid(format!("t{t}")), r).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let before = contents(&outbox);
    assert_eq!(before.len(), 8 * 20 * 2);
    for t in 0..8 {
        let mine: Vec<_> = before
            .iter()
            .filter(|(id, _)| id.as_str() == format!("t{t}"))
            .collect();
        for (i, pair) in mine.chunks(2).enumerate() {
            assert_eq!(pair[0].1, Report::comment(format!("{i}"), None));
            assert_eq!(pair[1].1, Report::status(TaskStatus::Review));
        }
    }
    // Delivered reports leave the queue at once and stay gone after a reopen.
    let first = outbox.files().lock().items.front().map(|i| i.seq).unwrap();
    outbox.mark_sent(first).await;
    assert_eq!(outbox.len(), before.len() - 1);
    // The sent record is written by the log's job: closed (awaited) before a reopen.
    outbox.close().await;
    drop(outbox);
    let again = Outbox::open(dir.path()).unwrap();
    assert_eq!(contents(&again), before[1..].to_vec());
}

/// A conclusion outlives its seven days while the journal has its event pending, and
/// every one survives an open (which has not asked the journal yet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conclusion_is_forgotten_only_once_its_event_is_done() {
    let dir = tempfile::tempdir().unwrap();
    let old = crate::util::now_millis() - files::REMEMBER_MS - 1000;
    let line =
        |event: &str| format!("{{\"r\":\"concluded\",\"event\":\"{event}\",\"at\":{old}}}\n");
    std::fs::write(
        dir.path().join("outbox.jsonl"),
        line("still-pending") + &line("done-long-ago"),
    )
    .unwrap();
    let outbox = Outbox::open(dir.path()).unwrap();
    assert!(outbox.concluded("still-pending") && outbox.concluded("done-long-ago"));
    outbox.keep_concluded_while(Arc::new(|id: &str| id == "still-pending"));
    outbox.files().lock().compact().unwrap();
    assert!(outbox.concluded("still-pending"));
    assert!(!outbox.concluded("done-long-ago"));
    // Written with reports, in the same append; read back after a reopen.
    let r = vec![Report::comment("result".to_string(), None)];
    outbox
        .push_concluding(&tid("t"), r, vec!["e1".into(), "e2".into()])
        .await
        .unwrap();
    drop(outbox);
    let again = Outbox::open(dir.path()).unwrap();
    assert!(again.concluded("e1") && again.concluded("e2") && again.concluded("still-pending"));
    assert_eq!(again.len(), 1);
}

/// A report queued before task ids were checked, for an id no path could take, is
/// kept in the dead letters at the next open, not dropped with its line.
#[test]
fn an_old_report_for_an_unusable_task_id_goes_to_the_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let report = serde_json::to_value(Report::comment("hi", None)).unwrap();
    let lines = [
        serde_json::json!({"r": "add", "seq": 1, "key": "k1", "task_id": "a/b", "report": report}),
        serde_json::json!({"r": "add", "seq": 2, "key": "k2", "task_id": "ok", "report": report}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(dir.path().join("outbox.jsonl"), text).unwrap();
    let outbox = Outbox::open(dir.path()).unwrap();
    assert_eq!(
        contents(&outbox),
        vec![(tid("ok"), Report::comment("hi", None))]
    );
    let (count, path) = outbox.dead_letters();
    assert_eq!(count, 1);
    let dead = std::fs::read_to_string(path).unwrap();
    assert!(
        dead.contains("\"a/b\"") && dead.contains("\"k1\""),
        "{dead}"
    );
    assert!(dead.contains("not a usable task id"), "{dead}");
}
