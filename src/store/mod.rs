//! What picogent keeps on disk, and how: `log` is the one append-only file primitive
//! (open off the runtime, a torn last line tolerated, bounded appends, group commit,
//! a sticky first failure, explicit compaction, an awaited close) that the tracker's
//! journal and outbox write through. `pg` is the store a fleet of workers shares
//! instead (`store: "postgres://…"`): the journal, the tasks' leases, the outbox and the
//! dead letters in PostgreSQL. `issues` is GitHub mode's record of an issue, which both
//! keep.

pub(crate) mod issues;
pub(crate) mod log;
pub(crate) mod pg;
