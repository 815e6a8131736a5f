//! Repositories for the tests of picogent's git work: a checkout with one commit and a
//! bare `origin` beside it.

use crate::common::{git, Sandbox};

/// The working folder as a repository with one commit of `shared.txt`.
pub fn repository(sb: &Sandbox) {
    sb.write("shared.txt", "original\n");
    git(&sb.work, &["init", "-q", "-b", "main"]);
    git(&sb.work, &["add", "."]);
    git(&sb.work, &["commit", "-q", "-m", "first"]);
}

/// A bare repository outside the allowed paths, added to the checkout as `origin`.
pub fn with_origin(sb: &Sandbox) -> std::path::PathBuf {
    let origin = sb.base().join("origin.git");
    git(
        &sb.base(),
        &["init", "-q", "--bare", origin.to_str().unwrap()],
    );
    git(
        &sb.work,
        &["remote", "add", "origin", origin.to_str().unwrap()],
    );
    origin
}
