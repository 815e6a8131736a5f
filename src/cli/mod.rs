//! The command line's own pieces, beside `main.rs`: the run printer, the `--session`
//! argument, the run's task and `picogent sandbox-check`.

pub(crate) mod approve;
pub(crate) mod printer;
pub(crate) mod sandbox_check;
pub(crate) mod session_arg;
pub(crate) mod task;
