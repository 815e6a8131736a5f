use super::*;

fn dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// A log whose appends fail for want of room, as a full disk makes them.
fn on_full_disk(path: &Path) -> Log {
    let file = std::fs::OpenOptions::new()
        .append(true)
        .open("/dev/full")
        .unwrap();
    Log::with_file(path, file)
}

#[tokio::test]
async fn appends_are_durable_in_order_and_read_back() {
    let d = dir();
    let path = d.path().join("a.jsonl");
    let log = Log::replace(&path, b"{\"n\":0}\n").unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    for n in 1..=50 {
        log.append(format!("{{\"n\":{n}}}\n").as_bytes()).unwrap();
        let order = order.clone();
        log.sync_then(move |r| {
            r.unwrap();
            lock(&order).push(n);
        });
    }
    log.sync().await.unwrap();
    assert_eq!(*lock(&order), (1..=50).collect::<Vec<_>>());
    let text = read(&path).unwrap();
    let ns: Vec<u64> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["n"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(ns, (0..=50).collect::<Vec<_>>());
    log.close().await.unwrap();
}

#[test]
fn a_torn_last_line_is_cut_off_and_a_missing_file_is_empty() {
    let d = dir();
    let path = d.path().join("t.jsonl");
    assert_eq!(read(&path).unwrap(), "");
    std::fs::write(&path, "{\"a\":1}\n{\"b\":").unwrap();
    assert_eq!(read(&path).unwrap(), "{\"a\":1}\n");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"a\":1}\n");
}

#[tokio::test]
async fn the_first_failure_sticks_until_a_rewrite_holds_the_content() {
    let d = dir();
    let path = d.path().join("f.jsonl");
    let log = on_full_disk(&path);
    log.append(b"{\"lost\":1}\n").unwrap();
    let err = log.sync().await.unwrap_err();
    assert!(crate::util::says_no_room(&err.to_string()), "{err}");
    assert!(err.to_string().contains("f.jsonl"), "{err}");
    // Sticky: later appends and syncs get it too.
    assert!(matches!(
        log.append(b"{\"x\":1}\n"),
        Err(LogError::Io { .. })
    ));
    assert!(matches!(log.sync().await, Err(LogError::Io { .. })));
    assert!(log.failed().is_some());
    // A compaction from memory writes a new file and clears it.
    log.rewrite(b"{\"kept\":1}\n".to_vec()).unwrap();
    log.append(b"{\"after\":1}\n").unwrap();
    log.sync().await.unwrap();
    assert!(log.failed().is_none());
    assert_eq!(read(&path).unwrap(), "{\"kept\":1}\n{\"after\":1}\n");
}

#[tokio::test]
async fn a_rewrite_supersedes_what_was_queued_and_answers_its_syncs_after_it() {
    let d = dir();
    let path = d.path().join("r.jsonl");
    let log = Log::replace(&path, b"").unwrap();
    for n in 0..100 {
        log.append(format!("{{\"old\":{n}}}\n").as_bytes()).unwrap();
    }
    let before = log.sync();
    log.rewrite(b"{\"compacted\":true}\n".to_vec()).unwrap();
    log.append(b"{\"new\":1}\n").unwrap();
    before.await.unwrap();
    log.sync().await.unwrap();
    let text = read(&path).unwrap();
    assert!(text.starts_with("{\"compacted\":true}\n"), "{text}");
    assert!(text.ends_with("{\"new\":1}\n"), "{text}");
    assert!(!text.contains("\"old\":99"), "{text}");
    log.close().await.unwrap();
}

#[tokio::test]
async fn appends_past_the_bound_fail_and_a_closed_log_takes_nothing() {
    let d = dir();
    let path = d.path().join("b.jsonl");
    let log = Log::replace(&path, b"").unwrap();
    // Nothing can reach the disk while the job waits for the file.
    let held = lock(&log.inner.file);
    let chunk = vec![b'x'; 1 << 20];
    let mut took = 0;
    let err = loop {
        match log.append(&chunk) {
            Ok(()) => took += 1,
            Err(e) => break e,
        }
        assert!(took <= MAX_PENDING >> 20, "the bound did not hold");
    };
    assert!(matches!(err, LogError::Full { .. }), "{err}");
    assert_eq!(took, MAX_PENDING >> 20);
    drop(held);
    log.close().await.unwrap();
    assert!(matches!(
        log.append(b"{}\n").unwrap_err(),
        LogError::Closed { .. }
    ));
    assert!(matches!(
        log.sync().await.unwrap_err(),
        LogError::Closed { .. }
    ));
    // Everything handed over before the close is on disk.
    assert_eq!(std::fs::metadata(&path).unwrap().len() as usize, took << 20);
}

#[test]
fn outside_a_runtime_the_log_writes_on_a_thread_of_its_own() {
    let d = dir();
    let path = d.path().join("n.jsonl");
    let log = Log::replace(&path, b"").unwrap();
    log.append(b"{\"a\":1}\n").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    log.sync_then(move |r| tx.send(r).unwrap());
    rx.recv().unwrap().unwrap();
    assert_eq!(read(&path).unwrap(), "{\"a\":1}\n");
}
