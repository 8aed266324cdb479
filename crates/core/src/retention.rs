//! Retention: every table that grows with use is pruned by age and by a row cap, the freed
//! space goes back to the file system, and `canopy status` shows the sizes.
//!
//! ```toml
//! [retention]
//! feed_days = 30            # default: [feed] keep_days
//! feed_rows = 1000000       # 0: no cap
//! hook_runs_days = 30
//! hook_runs_rows = 500000
//! runs_days = 90            # finished graph runs, with their specs' and nodes' rows
//! runs_rows = 50000
//! deliveries_days = 30      # default: [webhooks] keep_days
//! deliveries_rows = 500000
//! every_minutes = 10
//! ```
//!
//! A pass runs when the daemon starts and then every `every_minutes`. Each table is pruned a
//! batch of [`BATCH`] rows per write, each committed with whatever else waits, so a large
//! backlog never holds the writer for long; then freed pages go back to the file system, a
//! step of [`VACUUM_PAGES`] per write (the database runs incremental auto-vacuum). Rows in use
//! are never deleted (a hook run queued or running, a graph's current run, a delivery waiting
//! or running). Cron receipts have their own cap per cron (`keep_receipts`) and the feed's age.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use canopy_model::time::Timestamp;
use canopy_store::retention::Growing;
use canopy_store::{Store, StoreError};

/// Rows deleted by one write at most.
pub const BATCH: usize = 1_000;

/// Pages returned to the file system by one write at most (8 MiB of 4 KiB pages).
pub const VACUUM_PAGES: u32 = 2_048;

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// `[retention]` in `canopy.toml`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Days a feed row is kept (default: `[feed] keep_days`, 30).
    pub feed_days: Option<u32>,
    /// Feed rows kept at most (0: no cap).
    pub feed_rows: u64,
    pub hook_runs_days: u32,
    pub hook_runs_rows: u64,
    pub runs_days: u32,
    pub runs_rows: u64,
    /// Days a finished delivery is kept (default: `[webhooks] keep_days`, 30).
    pub deliveries_days: Option<u32>,
    pub deliveries_rows: u64,
    /// Minutes between passes.
    pub every_minutes: u32,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            feed_days: None,
            feed_rows: 1_000_000,
            hook_runs_days: 30,
            hook_runs_rows: 500_000,
            runs_days: 90,
            runs_rows: 50_000,
            deliveries_days: None,
            deliveries_rows: 500_000,
            every_minutes: 10,
        }
    }
}

impl RetentionConfig {
    /// Every problem, each naming its field.
    pub fn check(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (field, days) in [
            ("feed_days", self.feed_days),
            ("hook_runs_days", Some(self.hook_runs_days)),
            ("runs_days", Some(self.runs_days)),
            ("deliveries_days", self.deliveries_days),
        ] {
            if days.is_some_and(|d| !(1..=36_500).contains(&d)) {
                problems.push(format!("retention.{field}: must be from 1 to 36500"));
            }
        }
        if !(1..=1440).contains(&self.every_minutes) {
            problems.push("retention.every_minutes: must be from 1 to 1440 (a day)".to_string());
        }
        problems
    }
}

/// What one pass keeps: every table's age and row cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub feed_days: u32,
    pub feed_rows: u64,
    pub hook_runs_days: u32,
    pub hook_runs_rows: u64,
    pub runs_days: u32,
    pub runs_rows: u64,
    pub deliveries_days: u32,
    pub deliveries_rows: u64,
    pub every: Duration,
}

impl Policy {
    /// The policy of a configuration: `[retention]`, with the older `[feed] keep_days` and
    /// `[webhooks] keep_days` as the defaults of the ages they set.
    pub fn of(config: &crate::config::Config) -> Self {
        let retention = &config.retention;
        Self {
            feed_days: retention.feed_days.unwrap_or(config.feed.keep_days),
            feed_rows: retention.feed_rows,
            hook_runs_days: retention.hook_runs_days,
            hook_runs_rows: retention.hook_runs_rows,
            runs_days: retention.runs_days,
            runs_rows: retention.runs_rows,
            deliveries_days: retention
                .deliveries_days
                .or(config.webhooks.keep_days)
                .unwrap_or(30),
            deliveries_rows: retention.deliveries_rows,
            every: Duration::from_secs(u64::from(retention.every_minutes.max(1)) * 60),
        }
    }
}

/// What one pass deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    pub feed: usize,
    pub hook_runs: usize,
    pub runs: usize,
    pub deliveries: usize,
    /// Free pages found before the space was returned.
    pub free_pages: u64,
}

impl Pruned {
    fn rows(&self) -> usize {
        self.feed + self.hook_runs + self.runs + self.deliveries
    }
}

/// Starts [`run`] on a task of its own.
pub fn spawn(store: Store, policy: Policy) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(store, policy))
}

/// Prunes now, then every `policy.every`, for as long as the daemon runs.
pub async fn run(store: Store, policy: Policy) {
    let mut interval = tokio::time::interval(policy.every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        match prune(&store, &policy, SystemTime::now()).await {
            Ok(pruned) if pruned.rows() == 0 && pruned.free_pages == 0 => {
                tracing::debug!("retention: nothing to prune");
            }
            Ok(pruned) => tracing::info!(
                feed = pruned.feed,
                hook_runs = pruned.hook_runs,
                runs = pruned.runs,
                deliveries = pruned.deliveries,
                free_pages = pruned.free_pages,
                "retention: pruned rows past their age or cap, and returned the space"
            ),
            Err(err) => {
                tracing::error!(error = %err, "retention: cannot prune; trying again at the next pass");
            }
        }
    }
}

/// One pass: every table pruned, [`BATCH`] rows per write, then the free pages returned.
pub async fn prune(store: &Store, policy: &Policy, now: SystemTime) -> Result<Pruned, StoreError> {
    let mut pruned = Pruned::default();
    let before = cutoff(policy.feed_days, now);
    pruned.feed = batches(store, BATCH, move |tx| tx.prune_feed(before, BATCH)).await?;
    let rows = policy.feed_rows;
    pruned.feed += batches(store, BATCH, move |tx| tx.prune_feed_rows(rows, BATCH)).await?;
    // A run carries its specs' and nodes' rows: fewer per write.
    for (table, days, rows, limit) in [
        (
            Growing::HookRuns,
            policy.hook_runs_days,
            policy.hook_runs_rows,
            BATCH,
        ),
        (
            Growing::Runs,
            policy.runs_days,
            policy.runs_rows,
            BATCH / 10,
        ),
        (
            Growing::Deliveries,
            policy.deliveries_days,
            policy.deliveries_rows,
            BATCH,
        ),
    ] {
        let before = cutoff(days, now);
        let until = store
            .read(move |rd| rd.prune_cutoff(table, before, rows))
            .await?;
        let deleted = batches(store, limit, move |tx| tx.prune_before(table, until, limit)).await?;
        match table {
            Growing::HookRuns => pruned.hook_runs = deleted,
            Growing::Runs => pruned.runs = deleted,
            Growing::Deliveries => pruned.deliveries = deleted,
        }
    }
    loop {
        let free = store.write(|tx| tx.vacuum_step(VACUUM_PAGES)).await?;
        pruned.free_pages = pruned.free_pages.max(free);
        if free <= u64::from(VACUUM_PAGES) {
            return Ok(pruned);
        }
    }
}

/// Runs a delete of at most `limit` rows per write until one deletes fewer; the total.
async fn batches<F>(store: &Store, limit: usize, delete: F) -> Result<usize, StoreError>
where
    F: Fn(&canopy_store::Tx<'_>) -> Result<usize, StoreError> + Clone + Send + 'static,
{
    let mut total = 0;
    loop {
        let one = delete.clone();
        let deleted = store.write(move |tx| one(tx)).await?;
        total += deleted;
        if deleted < limit {
            return Ok(total);
        }
    }
}

/// `keep_days` before `now`; the epoch when that is earlier.
fn cutoff(keep_days: u32, now: SystemTime) -> Timestamp {
    let instant = now
        .checked_sub(DAY * keep_days)
        .filter(|at| *at >= SystemTime::UNIX_EPOCH)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    Timestamp::from_system(instant)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use canopy_model::events::plugin::{PluginEnabled, PluginRef};
    use canopy_model::events::{Cause, Event};
    use canopy_store::feed::FeedQuery;

    fn event() -> Event {
        Event::new(&PluginEnabled(PluginRef {
            plugin: "p".to_string(),
            version: "1".to_string(),
            sha256: String::new(),
            modes: Vec::new(),
        }))
    }

    #[tokio::test]
    async fn rows_older_than_the_retention_are_pruned_in_batches_and_newer_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("canopy.db")).unwrap();
        // More old rows than one batch deletes, then a few recent ones.
        let old = BATCH * 2 + 17;
        let kept = store
            .write(move |tx| {
                for _ in 0..old + 3 {
                    tx.append_feed("node", event(), &Cause::user())?;
                }
                Ok::<_, StoreError>(())
            })
            .await;
        kept.unwrap();
        // Every row was recorded now; the first `old` are made years old.
        let (first_new, head) = store
            .read(move |rd| {
                let rows = rd.feed(&FeedQuery {
                    limit: 3,
                    ..FeedQuery::default()
                })?;
                Ok::<_, StoreError>((rows[0].id, rd.feed_head()?))
            })
            .await
            .unwrap();
        let shift = first_new - 1;
        store
            .write(move |tx| tx.backdate_feed_for_test(shift, "2000-01-01T00:00:00.000000Z"))
            .await
            .unwrap();

        let now = SystemTime::now();
        let policy = Policy::of(&crate::config::Config::default());
        let pruned = prune(&store, &policy, now).await.unwrap();
        assert_eq!(pruned.feed, old);
        let left = store
            .read(|rd| {
                rd.feed(&FeedQuery {
                    limit: 1_000,
                    ..FeedQuery::default()
                })
            })
            .await
            .unwrap();
        let ids: Vec<i64> = left.iter().map(|r| r.id).collect();
        assert_eq!(ids, vec![first_new, first_new + 1, head]);
        // Nothing more to do, and the cursor stays where it was (ids are never reused).
        assert_eq!(prune(&store, &policy, now).await.unwrap().feed, 0);
        let next = store
            .write(|tx| tx.append_feed("node", event(), &Cause::user()))
            .await
            .unwrap();
        assert_eq!(next.id, head + 1);
    }

    #[test]
    fn the_cutoff_is_keep_days_back_and_never_before_the_epoch() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(40 * 24 * 60 * 60);
        assert_eq!(cutoff(30, now).to_string(), "1970-01-11T00:00:00.000000Z");
        assert_eq!(
            cutoff(36_500, now).to_string(),
            "1970-01-01T00:00:00.000000Z"
        );
    }
}

#[cfg(test)]
mod pass_tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use canopy_model::records::webhooks::DeliveryStatus;
    use canopy_store::webhooks::NewDelivery;

    fn delivery(status: DeliveryStatus, received_at: &str) -> NewDelivery {
        NewDelivery {
            id: canopy_store::new_ordered_id(),
            scope: "global".into(),
            hook: "h".into(),
            handler: "command".into(),
            node: "n1".into(),
            status,
            reason: None,
            method: "POST".into(),
            path: "/hooks/global/h".into(),
            query: None,
            content_type: None,
            headers: Vec::new(),
            // Large enough that the file's size tells whether the space came back.
            body: vec![b'x'; 16 * 1024],
            redelivery_of: None,
            test: false,
            received_at: received_at.parse().unwrap(),
            started_at: None,
            sender_delivery_id: None,
        }
    }

    #[tokio::test]
    async fn old_and_surplus_deliveries_go_the_waiting_ones_stay_and_the_file_shrinks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("canopy.db");
        let store = Store::open(&path).unwrap();
        // 2,000 finished deliveries from the year 2000, 300 recent, 5 still waiting from 2000.
        store
            .write(|tx| {
                for i in 0..2_305 {
                    let (status, at) = match i {
                        0..2_000 => (DeliveryStatus::Completed, "2000-01-01T00:00:00"),
                        2_000..2_300 => (DeliveryStatus::Failed, "2999-01-01T00:00:00"),
                        _ => (DeliveryStatus::Accepted, "2000-01-01T00:00:00"),
                    };
                    let at = format!("{at}.{i:06}Z");
                    tx.insert_delivery(&delivery(status, &at))?;
                }
                Ok::<_, StoreError>(())
            })
            .await
            .unwrap();
        drop(store.empty_log().await);
        let before = std::fs::metadata(&path).unwrap().len();
        let policy = Policy {
            deliveries_rows: 100,
            ..Policy::of(&crate::config::Config::default())
        };
        let pruned = prune(&store, &policy, SystemTime::now()).await.unwrap();
        // The 2,000 old ones by age, 200 of the recent ones past the cap of 100.
        assert_eq!(pruned.deliveries, 2_200);
        assert!(pruned.free_pages > 0);
        let sizes = store.read(|rd| rd.sizes()).await.unwrap();
        // The newest 100, and the 5 waiting ones whatever their age.
        assert_eq!(sizes.deliveries, 105);
        drop(store.empty_log().await);
        let after = std::fs::metadata(&path).unwrap().len();
        assert!(
            after * 4 < before,
            "the file did not shrink: {before} bytes before, {after} after"
        );
    }
}
