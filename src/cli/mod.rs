//! The command line's own pieces, beside `main.rs`: the run printer and the `--session`
//! argument.

pub(crate) mod printer;
pub(crate) mod session_arg;
