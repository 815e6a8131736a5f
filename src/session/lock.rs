//! The session lock: one holder per session id at a time (two prompts for one session
//! run one after the other; a rollback or an annotation waits for a run to end). Only
//! a holder can open a session to write (`SessionStore::open` takes a `SessionLock`),
//! and the session keeps it until everything it handed to its log is in the file, so
//! the next holder loads every line.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

type Locks = Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>;

/// The session locks of one store (shared by its clones).
#[derive(Debug, Clone, Default)]
pub(super) struct LockTable {
    locks: Locks,
}

/// Proof of holding a session's lock; let go when dropped.
#[derive(Debug)]
pub struct SessionLock {
    id: String,
    guard: Option<OwnedMutexGuard<()>>,
    locks: Locks,
}

impl LockTable {
    fn entry(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = crate::util::lock(&self.locks);
        map.entry(id.to_string()).or_default().clone()
    }

    /// Waits for the session's lock.
    pub(super) async fn lock(&self, id: &str) -> SessionLock {
        let guard = self.entry(id).lock_owned().await;
        self.held(id, guard)
    }

    /// The session's lock if nobody holds it.
    pub(super) fn try_lock(&self, id: &str) -> Option<SessionLock> {
        match self.entry(id).try_lock_owned() {
            Ok(guard) => Some(self.held(id, guard)),
            Err(_) => {
                self.forget_unused(id);
                None
            }
        }
    }

    /// Waits for the session's lock on this thread, which must not be a runtime's
    /// (a command-line tool, a test).
    pub(super) fn lock_blocking(&self, id: &str) -> SessionLock {
        let guard = self.entry(id).blocking_lock_owned();
        self.held(id, guard)
    }

    fn held(&self, id: &str, guard: OwnedMutexGuard<()>) -> SessionLock {
        SessionLock {
            id: id.to_string(),
            guard: Some(guard),
            locks: self.locks.clone(),
        }
    }

    /// Removes the id's entry when nobody holds or waits for it: nothing of a
    /// finished burst stays behind.
    fn forget_unused(&self, id: &str) {
        forget_unused(&self.locks, id);
    }
}

fn forget_unused(locks: &Locks, id: &str) {
    let mut map = crate::util::lock(locks);
    if map.get(id).is_some_and(|l| Arc::strong_count(l) == 1) {
        map.remove(id);
    }
}

impl SessionLock {
    /// The session it locks.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl Drop for SessionLock {
    fn drop(&mut self) {
        drop(self.guard.take());
        forget_unused(&self.locks, &self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_holder_at_a_time_and_nothing_left_behind() {
        let table = LockTable::default();
        let held = table.lock("s1").await;
        assert_eq!(held.id(), "s1");
        assert!(table.try_lock("s1").is_none());
        let other = table.try_lock("s2").expect("another session is free");
        let waiter = {
            let table = table.clone();
            tokio::spawn(async move { table.lock("s1").await })
        };
        drop(held);
        let next = waiter.await.unwrap();
        assert_eq!(next.id(), "s1");
        drop((next, other));
        assert!(crate::util::lock(&table.locks).is_empty());
    }
}
