use super::*;

fn window(old: &str, new: &str) -> (String, String, usize, Option<usize>) {
    let w = Window::new(old, new);
    (w.old.into(), w.new.into(), w.skipped, w.first_changed)
}

#[test]
fn the_window_keeps_five_lines_around_the_change() {
    let old: String = (1..=20).map(|i| format!("l{i}\n")).collect();
    let new = old.replace("l10\n", "X\n");
    let (o, n, skipped, first) = window(&old, &new);
    assert_eq!(skipped, 4);
    assert_eq!(first, Some(10));
    assert_eq!(o, "l5\nl6\nl7\nl8\nl9\nl10\nl11\nl12\nl13\nl14\nl15\n");
    assert_eq!(n, "l5\nl6\nl7\nl8\nl9\nX\nl11\nl12\nl13\nl14\nl15\n");
}

#[test]
fn the_window_handles_ends_without_newlines_and_equal_texts() {
    assert_eq!(
        window("a\nb", "a\nc"),
        ("a\nb".into(), "a\nc".into(), 0, Some(2))
    );
    assert_eq!(
        window("same\n", "same\n"),
        ("same\n".into(), "same\n".into(), 0, None)
    );
    assert_eq!(window("", "new\n"), ("".into(), "new\n".into(), 0, Some(1)));
    // A change that only appends: the common tail is empty.
    let (o, n, skipped, _) = window("1\n2\n3\n4\n5\n6\n7\n", "1\n2\n3\n4\n5\n6\n7\n8\n");
    assert_eq!(
        (o.as_str(), n.as_str(), skipped),
        ("3\n4\n5\n6\n7\n", "3\n4\n5\n6\n7\n8\n", 2)
    );
}

#[test]
fn block_comparisons_agree_with_byte_comparisons() {
    let a = "x".repeat(3 * BLOCK + 17);
    let mut b = a.clone().into_bytes();
    b[BLOCK + 5] = b'y';
    assert_eq!(common_prefix(a.as_bytes(), &b), BLOCK + 5);
    assert_eq!(common_suffix(a.as_bytes(), &b), a.len() - BLOCK - 6);
    assert_eq!(common_prefix(b"abc", b"abd"), 2);
    assert_eq!(common_suffix(b"xbc", b"abc"), 2);
    assert_eq!(common_suffix(b"", b"abc"), 0);
}

#[test]
fn the_unified_diff_is_numbered_in_the_whole_file() {
    let old: String = (1..=100).map(|i| format!("l{i}\n")).collect();
    let new = old.replace("l50\n", "L50\n");
    let shown = render(
        &Request {
            old: old.clone(),
            new: new.clone(),
            label: "f".into(),
            unified_cap: 1 << 20,
            numbered: false,
        },
        Duration::from_secs(1),
    );
    let whole = TextDiff::from_lines(&old, &new)
        .unified_diff()
        .context_radius(3)
        .header("f", "f")
        .to_string();
    assert_eq!(shown.unified.as_deref(), Some(whole.as_str()));
    assert_eq!(shown.first_changed, Some(50));
}

fn request(old: String, new: String) -> Request {
    Request {
        old,
        new,
        label: "f".into(),
        unified_cap: 1 << 20,
        numbered: true,
    }
}

#[test]
fn past_the_deadline_the_diff_is_coarse_but_correct() {
    let old: String = (0..2000).map(|i| format!("line {i}\n")).collect();
    let new: String = (0..2000)
        .map(|i| match i % 2 {
            0 => format!("changed {i}\n"),
            _ => format!("line {i}\n"),
        })
        .collect();
    let shown = render(&request(old.clone(), new.clone()), Duration::ZERO);
    assert!(
        shown.notes[0].starts_with("diff simplified"),
        "{:?}",
        shown.notes
    );
    // Every line changes or neighbours a change: one hunk, which rebuilds both texts.
    let unified = shown.unified.unwrap_or_default();
    let body: Vec<&str> = unified.split_inclusive('\n').skip(3).collect();
    let side = |keep: char| -> String {
        body.iter()
            .filter(|l| l.starts_with(keep) || l.starts_with(' '))
            .map(|l| &l[1..])
            .collect()
    };
    assert_eq!((side('-'), side('+')), (old, new));
    assert_eq!(shown.first_changed, Some(1));
}

#[test]
fn a_changed_region_too_large_is_not_diffed() {
    let new = "x\n".repeat(MAX_DIFF_BYTES);
    let shown = render(&request("keep\n".into(), new), Duration::from_secs(1));
    assert_eq!(
        (shown.unified, shown.numbered, shown.first_changed),
        (None, None, Some(1))
    );
    assert_eq!(
        shown.notes,
        ["diff not shown: the changed region is 8.0 MiB, more than the 4 MiB diffed"]
    );
}

#[test]
fn capped_text_cuts_on_char_boundaries() {
    let mut c = Capped::new(5);
    c.push("ab");
    c.push("cdé");
    c.push("z");
    assert_eq!((c.text.as_str(), c.cut), ("abcd", true));
}
