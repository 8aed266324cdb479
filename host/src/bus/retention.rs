//! Feed retention: rows older than `[feed] keep_days` are deleted, when the daemon starts and
//! then every hour, in small batches so a large backlog never holds the writer for long (each
//! batch is a write of its own, committed with whatever else is waiting).

use std::time::{Duration, SystemTime};

use crate::store::{Store, StoreError};

/// How often old rows are pruned after the first time (at start).
pub const EVERY: Duration = Duration::from_secs(60 * 60);

/// Rows deleted by one write at most.
pub const BATCH: usize = 1_000;

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// Starts [`run`] on a task of its own.
pub fn spawn(store: Store, keep_days: u32) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(store, keep_days))
}

/// Prunes now, then every [`EVERY`], for as long as the daemon runs.
pub async fn run(store: Store, keep_days: u32) {
    let mut interval = tokio::time::interval(EVERY);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        match prune(&store, keep_days, SystemTime::now()).await {
            Ok(0) => tracing::debug!(keep_days, "no feed rows to prune"),
            Ok(pruned) => tracing::info!(
                rows = pruned,
                keep_days,
                "pruned feed rows older than the retention"
            ),
            Err(err) => {
                tracing::error!(error = %err, keep_days, "cannot prune the feed; trying again in an hour");
            }
        }
    }
}

/// Deletes the feed rows recorded more than `keep_days` before `now`, [`BATCH`] at a time;
/// returns how many.
pub async fn prune(store: &Store, keep_days: u32, now: SystemTime) -> Result<usize, StoreError> {
    let before = cutoff(keep_days, now);
    let mut total = 0;
    loop {
        let before = before.clone();
        let pruned = store.write(move |tx| tx.prune_feed(&before, BATCH)).await?;
        total += pruned;
        if pruned < BATCH {
            return Ok(total);
        }
    }
}

/// `keep_days` before `now`, as the feed writes times (RFC 3339, UTC, microseconds); the
/// epoch when that is earlier.
fn cutoff(keep_days: u32, now: SystemTime) -> String {
    let instant = now
        .checked_sub(DAY * keep_days)
        .filter(|at| *at >= SystemTime::UNIX_EPOCH)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    humantime::format_rfc3339_micros(instant).to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::events::plugin::{PluginEnabled, PluginRef};
    use crate::events::{Cause, Event};
    use crate::store::feed::FeedQuery;

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
        let pruned = prune(&store, 30, now).await.unwrap();
        assert_eq!(pruned, old);
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
        assert_eq!(prune(&store, 30, now).await.unwrap(), 0);
        let next = store
            .write(|tx| tx.append_feed("node", event(), &Cause::user()))
            .await
            .unwrap();
        assert_eq!(next.id, head + 1);
    }

    #[test]
    fn the_cutoff_is_keep_days_back_and_never_before_the_epoch() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(40 * 24 * 60 * 60);
        assert_eq!(cutoff(30, now), "1970-01-11T00:00:00.000000Z");
        assert_eq!(cutoff(36_500, now), "1970-01-01T00:00:00.000000Z");
    }
}
