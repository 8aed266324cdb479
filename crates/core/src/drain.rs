//! A planned stop's drain: admission closes at once, admitted work gets a budget to finish,
//! then the rest is forced (its processes killed) and recorded before the daemon exits.
//!
//! Every piece of work that must be drained -- a cron firing, a webhook delivery's handler, a
//! graph node run, a hook run -- holds an [`Admitted`] guard for as long as it runs. [`Drain`]
//! refuses new admissions once a stop has begun, and [`Drain::wait_idle`] waits for the guards
//! to drop.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// How long admitted work may run on after a planned stop begins, unless the stop names its
/// own budget.
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(30);

/// How long forced work has to end (its processes killed) and be recorded.
pub const FORCE_GRACE: Duration = Duration::from_secs(5);

/// The longest drain budget a stop may ask for.
pub const MAX_BUDGET: Duration = Duration::from_secs(3600);

/// The daemon's drain: cheap to clone, shared by everything that admits work.
#[derive(Clone, Default)]
pub struct Drain {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    closed: AtomicBool,
    running: AtomicUsize,
    idle: Notify,
}

impl std::fmt::Debug for Drain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Drain")
            .field("closed", &self.is_closed())
            .field("running", &self.running())
            .finish()
    }
}

/// Held by one piece of admitted work; dropping it tells the drain the work has ended.
#[derive(Debug)]
#[must_use = "the work counts as running only while the guard is held"]
pub struct Admitted {
    drain: Drain,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let inner = &self.drain.inner;
        if inner.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            inner.idle.notify_waiters();
        }
    }
}

impl Drain {
    /// Admits one piece of work, or `None` once a planned stop has begun (the caller records
    /// the refusal).
    pub fn admit(&self) -> Option<Admitted> {
        // Counted before the check, so that a stop that closes admission in between sees it.
        self.inner.running.fetch_add(1, Ordering::AcqRel);
        let admitted = Admitted {
            drain: self.clone(),
        };
        if self.is_closed() {
            drop(admitted);
            return None;
        }
        Some(admitted)
    }

    /// Whether a planned stop has begun.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// Pieces of admitted work still running.
    pub fn running(&self) -> usize {
        self.inner.running.load(Ordering::Acquire)
    }

    /// Closes admission: from now on [`Drain::admit`] refuses.
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
    }

    /// Waits until no admitted work runs, or `budget` passes; true when everything ended.
    pub async fn wait_idle(&self, budget: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + budget;
        loop {
            let idle = self.inner.idle.notified();
            tokio::pin!(idle);
            // Registered before the check, so a guard dropped in between still wakes us.
            idle.as_mut().enable();
            if self.running() == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return self.running() == 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn admission_closes_and_the_drain_waits_for_admitted_work() {
        let drain = Drain::default();
        let first = drain.admit();
        assert!(first.is_some());
        drain.close();
        assert!(drain.admit().is_none(), "a stop refuses new work");
        assert_eq!(drain.running(), 1);
        assert!(!drain.wait_idle(Duration::from_millis(20)).await);
        let waiter = {
            let drain = drain.clone();
            tokio::spawn(async move { drain.wait_idle(Duration::from_secs(10)).await })
        };
        drop(first);
        assert!(waiter.await.unwrap_or(false), "the drain saw the work end");
    }
}
