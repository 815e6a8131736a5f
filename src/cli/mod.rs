//! The command line's own pieces, beside `main.rs`: `picogent run` (its printer, its
//! `--session` argument and task, its approvals at the terminal) and `picogent
//! sandbox-check`.

pub(crate) mod approve;
pub(crate) mod printer;
pub(crate) mod run;
pub(crate) mod sandbox_check;
pub(crate) mod session_arg;
pub(crate) mod task;
