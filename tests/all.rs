//! One integration-test binary: shared helpers in `common/`, tests in `suite/`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod common;
mod suite;
