//! Text picogent writes where GitHub reads it — commit messages, a pull request's title
//! and body, comments — carries what the model or an issue's author wrote. Two things
//! in it act on GitHub: a closing keyword before an issue (`Fixes #3`) closes that
//! issue once the text reaches the default branch, and a mention (`@alice`,
//! `@org/team`) calls people in. `defuse` breaks both with a zero-width space, so the
//! text reads the same; picogent's own `Closes #n` is added after it.
//!
//! GitHub documents the keywords close, closes, closed, fix, fixes, fixed, resolve,
//! resolves, resolved, in any case and with an optional colon, before `#n` or
//! `owner/repo#n`. Taken in as well, to be safe: `GH-n`, an issue's URL on any host (an
//! Enterprise server's too), and markdown between the keyword and the issue
//! (`**Fixes** #1`). Code is not spared: a commit message has no markdown, and
//! keywords in backticks are reported to close; an invisible space there is cheaper
//! than telling code apart as GitHub would.

use std::sync::OnceLock;

use regex::{Captures, Regex};

const ZWSP: char = '\u{200b}';

/// `text` with no live closing keyword and no live mention.
pub(crate) fn defuse(text: &str) -> String {
    mentions(&keywords(text))
}

/// A keyword gets the space after its second letter: no keyword starts there, and
/// whatever follows (an issue's link) still reads and links as before.
fn keywords(text: &str) -> String {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(concat!(
            r"(?i)(^|[^a-z0-9])",
            r"(close[sd]?|fix(?:e[sd])?|resolve[sd]?)",
            r"([\s:*_~`<\[(]*)",
            r"(#|gh-[0-9]|[\w.-]+/[\w.-]+#|https?://)"
        ))
        .ok()
    });
    let Some(re) = re else {
        // (The pattern is a constant: a unit test builds it.)
        return text.to_string();
    };
    re.replace_all(text, |c: &Captures| {
        let word = &c[2];
        let cut = word.char_indices().nth(2).map_or(word.len(), |(i, _)| i);
        format!(
            "{}{}{ZWSP}{}{}{}",
            &c[1],
            &word[..cut],
            &word[cut..],
            &c[3],
            &c[4]
        )
    })
    .into_owned()
}

/// An `@` before a name gets the space after it, unless a letter, digit or `_` comes
/// before it (an e-mail address, `a@b.c`, is no mention on GitHub either).
fn mentions(text: &str) -> String {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    let re = RE.get_or_init(|| Regex::new(r"(^|[^A-Za-z0-9_])@([A-Za-z0-9])").ok());
    match re {
        Some(re) => re
            .replace_all(text, format!("$1@{ZWSP}$2").as_str())
            .into_owned(),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What GitHub would still read as a closing keyword before an issue.
    fn live_keywords(text: &str) -> Vec<String> {
        let re = Regex::new(concat!(
            r"(?i)(?:^|[^a-z0-9])(close[sd]?|fix(?:e[sd])?|resolve[sd]?)[\s:*_~`<\[(]*",
            r"(#[0-9]+|gh-[0-9]+|[\w.-]+/[\w.-]+#[0-9]+|https?://\S+/issues/[0-9]+)"
        ))
        .unwrap();
        re.find_iter(text).map(|m| m.as_str().to_string()).collect()
    }

    #[test]
    fn every_closing_form_is_broken_and_reads_the_same() {
        let forms = [
            "Fixes #1",
            "fix #1",
            "FIXED #1",
            "close #2",
            "Closes #2",
            "closed #2",
            "resolve #3",
            "Resolves #3",
            "RESOLVED #3",
            "Fixes: #4",
            "CLOSES: #4",
            "closes:#4",
            "fixes#4",
            "resolves acme/widgets#5",
            "Fixes other-org/some.repo#5",
            "fixes GH-6",
            "Fixes https://github.com/acme/widgets/issues/7",
            "closes http://127.0.0.1:8080/acme/widgets/issues/7",
            "Resolves https://ghe.example.com/acme/widgets/issues/7",
            "**Fixes** #8",
            "__Fixes__ #8",
            "Fixes [#8](https://github.com/acme/widgets/issues/8)",
            "`fixes #9`",
            "Fixes\t#9",
            "- closes #9",
        ];
        for form in forms {
            assert_eq!(live_keywords(form).len(), 1, "the checker misses {form:?}");
            let d = defuse(form);
            assert_eq!(live_keywords(&d), Vec::<String>::new(), "{form:?} -> {d:?}");
            assert_eq!(d.replace(ZWSP, ""), form, "{form:?} reads differently");
        }
        let many = "Resolves #10, resolves #123, resolves octo-org/octo-repo#100";
        let d = defuse(many);
        assert!(live_keywords(&d).is_empty(), "{d:?}");
        assert_eq!(d.matches(ZWSP).count(), 3, "{d:?}");
    }

    #[test]
    fn words_that_only_look_alike_are_left_alone() {
        for text in [
            "The fixture #1 and prefix #2 stay.",
            "hotfix #3, unresolved #4, enclosed #5",
            "It closes the door; fixes come later.",
            "see #6 and acme/widgets#7",
        ] {
            assert_eq!(defuse(text), text);
        }
    }

    #[test]
    fn mentions_are_broken_and_addresses_are_not() {
        assert_eq!(defuse("@alice"), "@\u{200b}alice");
        assert_eq!(
            defuse("thanks @alice, (@bob) and @acme/core-team!"),
            "thanks @\u{200b}alice, (@\u{200b}bob) and @\u{200b}acme/core-team!"
        );
        assert_eq!(
            defuse("`@carol` x.@dave"),
            "`@\u{200b}carol` x.@\u{200b}dave"
        );
        for text in [
            "write to a@b.c or first_last@example.org",
            "git@github.com:acme/widgets.git",
            "@@ -1,3 +1,4 @@",
            "an @ alone, @-x, @",
        ] {
            assert_eq!(defuse(text), text);
        }
    }

    #[test]
    fn defusing_twice_changes_nothing_more() {
        let text = "Fixes #1, cc @alice; closes acme/widgets#2 — fixes GH-3";
        let once = defuse(text);
        assert_ne!(once, text);
        assert_eq!(defuse(&once), once);
        // A keyword's letters may fold from other scripts: the cut is on a character.
        let odd = "cloſes #1";
        assert_eq!(defuse(odd).replace(ZWSP, ""), odd);
    }
}
