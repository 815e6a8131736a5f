//! What picogent keeps on disk, and how: `log` is the one append-only file primitive
//! (open off the runtime, a torn last line tolerated, bounded appends, group commit,
//! a sticky first failure, explicit compaction, an awaited close) that the tracker's
//! journal and outbox write through.

pub(crate) mod log;
