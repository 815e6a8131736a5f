use super::task_slug;

#[test]
fn task_slugs_are_safe_and_never_shared() {
    let ids = [
        "x",
        "task-x",
        "task-task-x",
        "a",
        "a.lock",
        ".a",
        "-a",
        "a..b",
        "a._b",
        "",
        "task",
        ".",
        "../x",
        "-rf",
        "@{u}",
        "a.",
        "T 1",
        "t_1",
    ];
    let slugs: Vec<String> = ids.iter().map(|i| task_slug(i)).collect();
    for (i, s) in ids.iter().zip(&slugs) {
        assert!(
            !s.is_empty()
                && !s.starts_with('-')
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{i:?} -> {s:?}"
        );
    }
    let mut unique = slugs.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), slugs.len(), "{slugs:?}");
    assert_eq!(task_slug("t-12"), "t-12");
    assert!(task_slug(&"y".repeat(500)).len() < 100);
}
