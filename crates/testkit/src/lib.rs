//! The test kit shared by picogent's integration tests, examples and benchmarks: the
//! scripted model server (`llm`, speaking the providers' wire formats byte-faithfully,
//! with the APIs' prompt caching in `llm_cache`) and the fake Team Board tracker
//! (`tracker`, speaking docs/tracker-protocol.md), and a database of its own for each
//! test on the PostgreSQL server scripts/pg.sh starts (`pg`), and a TCP proxy that
//! cuts a worker off from it (`proxy`). Test code: it may panic on misuse.
#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod llm;
pub mod llm_cache;
mod llm_wire;
pub mod pg;
pub mod proxy;
pub mod tracker;
