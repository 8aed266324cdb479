//! The feed (`feed`): every event Canopy emitted, with its envelope, in the order it was
//! recorded. The row id is the feed's cursor: it only grows and is never reused, even after
//! old rows are pruned.

use crate::sql::{self, Conn, Queries, Row, params};
use serde_json::Value;

use super::times::{At, time};
use super::{Rd, StoreError, Tx};
use canopy_model::events::{Cause, Envelope, Event, Family};
use canopy_model::time::Timestamp;

const COLUMNS: &str =
    "id, node, project, target, event, family, timestamp, actor, dispatch_depth, payload";

fn from_row(row: &Row<'_>) -> sql::Result<Envelope> {
    let family: String = row.get(5)?;
    let payload: String = row.get(9)?;
    Ok(Envelope {
        id: row.get(0)?,
        node: row.get(1)?,
        project: row.get(2)?,
        target: row.get(3)?,
        event: row.get(4)?,
        family: Family::parse(&family).ok_or_else(|| {
            sql::Error::column(5, format!("`{family}` is not an event family").into())
        })?,
        timestamp: time(row, 6)?,
        actor: row.get(7)?,
        dispatch_depth: row.get(8)?,
        payload: serde_json::from_str(&payload).unwrap_or(Value::Null),
    })
}

/// Where a feed read starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Since {
    /// The rows after this cursor.
    Cursor(i64),
    /// The rows recorded at or after this instant (RFC 3339, UTC).
    Time(Timestamp),
}

/// A feed read: rows after `since` (or the newest `limit`), filtered.
#[derive(Debug, Clone, Default)]
pub struct FeedQuery {
    pub since: Option<Since>,
    /// Only these events (an event pattern expanded against the taxonomy, so the store and a
    /// live reader match the same names); `None`: every event.
    pub events: Option<Vec<String>>,
    pub family: Option<Family>,
    pub project: Option<String>,
    /// Without `since`: the newest this many, oldest first. With it: at most this many.
    pub limit: usize,
    /// Only rows up to this cursor (a follower's settled horizon, see [`Rd::feed_settled`]).
    pub until: Option<i64>,
}

/// A gap a feed reader waits on (see [`Rd::feed_settled`]): its first missing cursor, and the
/// first transaction id not yet handed out when the reader first saw it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FeedGap(Option<(i64, i64)>);

/// How far a reader after a cursor may read the feed now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    /// Every row up to this cursor that will ever be committed is committed.
    pub through: i64,
    /// A row after `through` is still missing and may yet be committed: read again shortly.
    pub waiting: bool,
}

impl FeedQuery {
    /// Whether a row passes the query's filters (`since` and `limit` aside): what the SQL of
    /// [`Rd::feed`] keeps, for envelopes that arrive live.
    pub fn matches(&self, envelope: &Envelope) -> bool {
        self.events
            .as_ref()
            .is_none_or(|events| events.contains(&envelope.event))
            && self.family.is_none_or(|f| f == envelope.family)
            && self
                .project
                .as_ref()
                .is_none_or(|p| envelope.project.as_ref() == Some(p))
    }
}

impl Rd<'_> {
    /// Feed rows matching the query, oldest first.
    pub fn feed(&self, query: &FeedQuery) -> Result<Vec<Envelope>, StoreError> {
        // A time becomes the cursor just before it (found on the time index), so every read
        // with a `since` seeks the primary key.
        let after = match &query.since {
            Some(Since::Cursor(id)) => Some(*id),
            Some(Since::Time(at)) => Some(self.feed_cursor_at(*at)?),
            None => None,
        };
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
        let family = query.family.map(Family::as_str);
        let events = query
            .events
            .as_ref()
            .map(serde_json::to_string)
            .transpose()?;
        // Only the filters given are written into the statement, so the planner can seek with
        // them: `(?1 IS NULL OR id > ?1)` kept the primary key out of reach, and a follower
        // catching up read the whole feed (96 ms at 588k rows, against 0.2 ms).
        let mut terms: Vec<String> = Vec::new();
        let mut args: Vec<(&str, &dyn sql::ToSql)> = vec![(":limit", &limit)];
        if let Some(after) = &after {
            terms.push("id > :after".into());
            args.push((":after", after));
        }
        if let Some(until) = &query.until {
            terms.push("id <= :until".into());
            args.push((":until", until));
        }
        if let Some(events) = &events {
            terms.push(self.dialect().in_json_list("event", ":events"));
            args.push((":events", events));
        }
        if let Some(family) = &family {
            terms.push("family = :family".into());
            args.push((":family", family));
        }
        if let Some(project) = &query.project {
            terms.push("project = :project".into());
            args.push((":project", project));
        }
        let filter = if terms.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", terms.join(" AND "))
        };
        let order = if query.since.is_some() { "" } else { " DESC" };
        let mut rows: Vec<Envelope> = self.query_map_named(
            &format!("SELECT {COLUMNS} FROM feed {filter} ORDER BY id{order} LIMIT :limit"),
            args.as_slice(),
            from_row,
        )?;
        if query.since.is_none() {
            rows.reverse();
        }
        Ok(rows)
    }

    /// The cursor just before the first row recorded at or after `time`: a
    /// reader after it reads from that instant on. The newest cursor when no row is that new.
    pub fn feed_cursor_at(&self, time: Timestamp) -> Result<i64, StoreError> {
        let first: Option<i64> = self.query_opt(
            "SELECT id FROM feed WHERE timestamp >= ?1 ORDER BY timestamp, id LIMIT 1",
            params![At(time)],
            |row| row.get(0),
        )?;
        match first {
            Some(id) => Ok(id - 1),
            None => self.feed_head(),
        }
    }

    /// How far a reader that has every row up to `after` may read now without passing a row
    /// that may still be committed, given the gap it waited on last time (`gap`, updated).
    ///
    /// On SQLite one writer commits in the order of the ids: every row is settled. On
    /// PostgreSQL daemons append at once, each id taken from a sequence without a lock, so
    /// a row may commit after a higher one. A transaction takes its id (`pg_current_xact_id`)
    /// before its first feed row (see `Dialect::feed_append`), so the owner of a missing row
    /// below a visible one had its transaction id before this read's snapshot was taken: once
    /// every transaction older than that snapshot's `xmax` has ended, the row is either
    /// visible or never will be (rolled back, or pruned).
    pub fn feed_settled(&self, after: i64, gap: &mut FeedGap) -> Result<Settled, StoreError> {
        const PAGE: i64 = 1_000;
        if self.dialect() == crate::sql::Dialect::Sqlite {
            return Ok(Settled {
                through: self.feed_head()?.max(after),
                waiting: false,
            });
        }
        let (xmin, xmax): (i64, i64) = self.query_row(
            "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::int8,
                    pg_snapshot_xmax(pg_current_snapshot())::text::int8",
            params![],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        let mut through = after;
        loop {
            let ids: Vec<i64> = self.query_map(
                "SELECT id FROM feed WHERE id > ?1 ORDER BY id LIMIT ?2",
                params![through, PAGE],
                |row| row.get(0),
            )?;
            let full = ids.len() as i64 == PAGE;
            for id in ids {
                if id != through + 1 {
                    let missing = through + 1;
                    match gap.0 {
                        // Seen before, and every transaction that could fill it has ended.
                        Some((seen, seen_xmax)) if seen == missing && xmin >= seen_xmax => {}
                        Some((seen, _)) if seen == missing => {
                            return Ok(Settled {
                                through,
                                waiting: true,
                            });
                        }
                        _ => {
                            gap.0 = Some((missing, xmax));
                            return Ok(Settled {
                                through,
                                waiting: true,
                            });
                        }
                    }
                }
                through = id;
                gap.0 = None;
            }
            if !full {
                return Ok(Settled {
                    through,
                    waiting: false,
                });
            }
        }
    }

    /// The newest cursor (0 for an empty feed).
    pub fn feed_head(&self) -> Result<i64, StoreError> {
        Ok(
            self.query_row("SELECT COALESCE(MAX(id), 0) FROM feed", params![], |row| {
                row.get(0)
            })?,
        )
    }
}

impl Tx<'_> {
    /// Appends an event to the feed; returns its envelope with its cursor (and the event's
    /// payload, moved into it).
    pub fn append_feed(
        &self,
        node: &str,
        event: Event,
        cause: &Cause,
    ) -> Result<Envelope, StoreError> {
        let timestamp = Timestamp::now();
        let actor = cause.actor.to_string();
        if let Some(prelude) = self.dialect().feed_append()
            && self.feed_prelude_due()
        {
            // Once per transaction: its id is taken before its first row's, and the one
            // notice wakes the other daemons for every row it appends. It names the node: a
            // daemon does not read back its own rows.
            if let Err(err) = self.execute(prelude, params![node]) {
                self.feed_prelude_ran(false);
                return Err(err.into());
            }
        }
        let id: i64 = self.query_row("INSERT INTO feed (node, project, target, event, family, timestamp, actor, dispatch_depth, payload)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) RETURNING id", params![
                node,
                event.project,
                event.target,
                event.def.name,
                event.def.family.as_str(),
                At(timestamp),
                actor,
                cause.depth,
                event.text()
            ], |row| row.get(0))?;
        Ok(Envelope {
            id,
            node: node.to_string(),
            project: event.project,
            target: event.target,
            event: event.def.name.to_string(),
            family: event.def.family,
            timestamp,
            actor,
            dispatch_depth: cause.depth,
            payload: event.payload,
        })
    }

    /// Deletes feed rows recorded before `before`, at most `limit` of them (a
    /// large backlog is pruned in several small writes); returns how many.
    pub fn prune_feed(&self, before: Timestamp, limit: usize) -> Result<usize, StoreError> {
        Ok(self.execute("DELETE FROM feed WHERE id IN (SELECT id FROM feed WHERE timestamp < ?1 ORDER BY id LIMIT ?2)", params![At(before), i64::try_from(limit).unwrap_or(i64::MAX)])?)
    }
}

#[cfg(any(test, feature = "testing"))]
impl Tx<'_> {
    /// Sets the time of every row up to cursor `up_to` (retention tests).
    pub fn backdate_feed_for_test(&self, up_to: i64, at: &str) -> Result<(), StoreError> {
        self.execute(
            "UPDATE feed SET timestamp = ?2 WHERE id <= ?1",
            params![up_to, at],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::Store;
    use canopy_model::events::plugin::{PluginDisabled, PluginEnabled, PluginRef};
    use canopy_model::events::session::{SessionCreated, SessionRef};

    fn plugin(name: &str) -> PluginRef {
        PluginRef {
            plugin: name.to_string(),
            version: "1.0.0".to_string(),
            sha256: "ab".repeat(32),
            modes: vec!["command".to_string()],
        }
    }

    fn session(name: &str, workdir: &str) -> Event {
        Event::new(&SessionCreated(SessionRef {
            session_id: format!("{name}-id"),
            session_name: Some(name.to_string()),
            workdir: Some(workdir.to_string()),
        }))
    }

    /// Appends the events in one write; returns their envelopes.
    fn append(store: &Store, events: Vec<Event>) -> Vec<Envelope> {
        store
            .write_blocking(move |tx| {
                events
                    .into_iter()
                    .map(|e| tx.append_feed("node-a", e, &Cause::user()))
                    .collect::<Result<Vec<_>, _>>()
            })
            .unwrap()
    }

    fn read(store: &Store, query: FeedQuery) -> Vec<Envelope> {
        store.read_blocking(move |rd| rd.feed(&query)).unwrap()
    }

    /// On a shared PostgreSQL database a row may commit after a higher one: a reader after a
    /// cursor waits at the missing row while its transaction runs, takes it once committed,
    /// and passes a row rolled back once every transaction that could hold it has ended.
    #[test]
    fn a_reader_waits_for_a_row_still_being_committed_and_passes_one_rolled_back() {
        let url = crate::pg::cluster::scratch_database().unwrap();
        let store = Store::open_postgres(&url, "a").unwrap();
        let mut other = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        // Another daemon's transaction, as `append_feed` runs it: its id first, then its row.
        let begin_other = |client: &mut postgres::Client| {
            client
                .batch_execute(
                    "BEGIN; SELECT pg_current_xact_id();
                     INSERT INTO feed (node, event, family, timestamp, actor, payload)
                         VALUES ('b', 'session.created', 'session', '2026-01-01T00:00:00Z', 'user', '{}')",
                )
                .unwrap();
        };
        let settled = |cursor: i64, gap: &mut FeedGap| {
            let seen = *gap;
            let (settled, seen) = store
                .read_blocking(move |rd| {
                    let mut gap = seen;
                    Ok::<_, StoreError>((rd.feed_settled(cursor, &mut gap)?, gap))
                })
                .unwrap();
            *gap = seen;
            settled
        };
        let mut gap = FeedGap::default();

        begin_other(&mut other); // holds row 1
        append(&store, vec![session("two", "/w")]); // row 2, committed
        let waiting = Settled {
            through: 0,
            waiting: true,
        };
        assert_eq!(settled(0, &mut gap), waiting);
        // Still running: still waited for, however often the reader looks.
        assert_eq!(settled(0, &mut gap), waiting);
        other.batch_execute("COMMIT").unwrap();
        assert_eq!(
            settled(0, &mut gap),
            Settled {
                through: 2,
                waiting: false
            }
        );
        let rows = read(
            &store,
            FeedQuery {
                since: Some(Since::Cursor(0)),
                until: Some(2),
                limit: 10,
                ..Default::default()
            },
        );
        assert_eq!(rows.iter().map(|r| r.id).collect::<Vec<_>>(), [1, 2]);

        begin_other(&mut other); // holds row 3
        other.batch_execute("ROLLBACK").unwrap();
        append(&store, vec![session("four", "/w")]); // row 4
        assert_eq!(
            settled(2, &mut gap),
            Settled {
                through: 2,
                waiting: true
            }
        );
        // Every transaction that could have held row 3 has ended: it never comes.
        assert_eq!(
            settled(2, &mut gap),
            Settled {
                through: 4,
                waiting: false
            }
        );
    }

    /// On SQLite the one writer commits in the order of the ids: everything is settled.
    #[test]
    fn on_sqlite_every_row_is_settled() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("canopy.db")).unwrap();
        append(&store, vec![session("one", "/w"), session("two", "/w")]);
        let settled = store
            .read_blocking(|rd| rd.feed_settled(0, &mut FeedGap::default()))
            .unwrap();
        assert_eq!(
            settled,
            Settled {
                through: 2,
                waiting: false
            }
        );
    }

    #[test]
    fn writes_sent_together_append_only_what_they_keep_in_order() {
        crate::each_backend::check(writes_sent_together_append_only_what_they_keep_in_order_on);
    }

    /// Many writes at once share transactions (a savepoint each); every seventh appends and
    /// then fails. On PostgreSQL the feed's order is taken once per transaction, and a rolled
    /// back savepoint gives it back: the next write that appends must take it again.
    fn writes_sent_together_append_only_what_they_keep_in_order_on(store: &Store) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let results = runtime.block_on(async {
            let writes: Vec<_> = (0..150)
                .map(|n: usize| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        store
                            .write(move |tx| {
                                tx.append_feed(
                                    "node-a",
                                    session(&format!("s{n}"), "/w"),
                                    &Cause::user(),
                                )?;
                                if n % 7 == 3 {
                                    return Err(StoreError::Internal(anyhow::anyhow!("no")));
                                }
                                tx.append_feed(
                                    "node-a",
                                    session(&format!("t{n}"), "/w"),
                                    &Cause::user(),
                                )?;
                                Ok::<_, StoreError>(())
                            })
                            .await
                    })
                })
                .collect();
            let mut results = Vec::new();
            for write in writes {
                results.push(write.await.unwrap().is_ok());
            }
            results
        });
        let kept: Vec<usize> = (0..150).filter(|n| n % 7 != 3).collect();
        let expected: Vec<bool> = (0..150).map(|n| n % 7 != 3).collect();
        assert_eq!(results, expected);
        let rows = read(
            store,
            FeedQuery {
                limit: 1_000,
                since: Some(Since::Cursor(0)),
                ..Default::default()
            },
        );
        assert!(rows.windows(2).all(|w| w[0].id < w[1].id));
        let mut names: Vec<String> = rows
            .iter()
            .map(|row| row.payload["session_name"].as_str().unwrap().to_string())
            .collect();
        names.sort();
        let mut wanted: Vec<String> = kept
            .iter()
            .flat_map(|n| [format!("s{n}"), format!("t{n}")])
            .collect();
        wanted.sort();
        assert_eq!(names, wanted);
    }

    #[test]
    fn the_feed_reads_the_newest_or_after_a_cursor_and_filters_like_a_live_reader() {
        crate::each_backend::check(
            the_feed_reads_the_newest_or_after_a_cursor_and_filters_like_a_live_reader_on,
        );
    }

    fn the_feed_reads_the_newest_or_after_a_cursor_and_filters_like_a_live_reader_on(
        store: &Store,
    ) {
        let rows = append(
            store,
            vec![
                Event::new(&PluginEnabled(plugin("a"))),
                session("lead", "/w/one"),
                Event::new(&PluginDisabled(plugin("b"))),
                session("pair", "/w/two"),
            ],
        );
        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "{ids:?}");

        // The newest two, oldest first.
        let newest = read(
            store,
            FeedQuery {
                limit: 2,
                ..FeedQuery::default()
            },
        );
        assert_eq!(newest, rows[2..].to_vec());
        // After a cursor, at most `limit`.
        let after = read(
            store,
            FeedQuery {
                since: Some(Since::Cursor(ids[0])),
                limit: 2,
                ..FeedQuery::default()
            },
        );
        assert_eq!(after, rows[1..3].to_vec());

        let queries = [
            FeedQuery {
                events: Some(vec!["plugin.disabled".to_string()]),
                ..FeedQuery::default()
            },
            FeedQuery {
                family: Some(Family::Session),
                ..FeedQuery::default()
            },
            FeedQuery {
                project: Some("/w/two".to_string()),
                ..FeedQuery::default()
            },
            FeedQuery {
                events: Some(vec![
                    "plugin.enabled".to_string(),
                    "session.created".to_string(),
                ]),
                project: Some("/w/one".to_string()),
                ..FeedQuery::default()
            },
        ];
        for query in queries {
            let expected: Vec<Envelope> =
                rows.iter().filter(|r| query.matches(r)).cloned().collect();
            assert!(!expected.is_empty(), "{query:?}");
            let query = FeedQuery {
                limit: 100,
                ..query
            };
            assert_eq!(read(store, query.clone()), expected, "{query:?}");
        }
    }

    #[test]
    fn a_time_is_a_cursor_just_before_the_first_row_that_new() {
        crate::each_backend::check(a_time_is_a_cursor_just_before_the_first_row_that_new_on);
    }

    fn a_time_is_a_cursor_just_before_the_first_row_that_new_on(store: &Store) {
        let first = append(store, vec![session("lead", "/w")]);
        let now = Timestamp::now();
        let later = append(store, vec![session("pair", "/w"), session("solo", "/w")]);
        let (at, head) = {
            store
                .read_blocking(move |rd| {
                    Ok::<_, StoreError>((rd.feed_cursor_at(now)?, rd.feed_head()?))
                })
                .unwrap()
        };
        assert_eq!(at, first[0].id);
        assert_eq!(head, later[1].id);
        let since_time = read(
            store,
            FeedQuery {
                since: Some(Since::Time(now)),
                limit: 100,
                ..FeedQuery::default()
            },
        );
        assert_eq!(since_time, later);
        let future = store
            .read_blocking(|rd| rd.feed_cursor_at("9999-01-01T00:00:00Z".parse().unwrap()))
            .unwrap();
        assert_eq!(future, head);
    }
}
