//! The query plans of the store's hot reads, checked: every read that filters the tables which
//! grow without pause (the feed, hook runs, webhook deliveries, cron receipts) seeks an index or
//! the primary key instead of scanning the table. A filter written `(?1 IS NULL OR id > ?1)`
//! plans as a scan whatever the value, which a test with a small table never notices: a feed
//! follower catching up at 588k rows took 96 ms per read that way, against 0.2 ms.
//!
//! The statements are the ones the reads really prepare (captured with SQLite's statement
//! trace, unexpanded), planned with `EXPLAIN QUERY PLAN` with no value bound, as SQLite plans
//! a prepared statement.

#![allow(clippy::unwrap_used)]

use std::cell::RefCell;

use rusqlite::Connection;
use rusqlite::trace::{TraceEvent, TraceEventCodes};

use super::db::{Rd, Tx};
use super::feed::{FeedQuery, Since};
use super::hook_runs::HookRunFilter;
use super::webhooks::DeliveryFilter;

thread_local! {
    /// The statements run on this thread while [`plans_of`] watched (the trace callback runs
    /// on the thread that steps the statement; tests run on threads of their own).
    static SEEN: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

fn seen(event: TraceEvent<'_>) {
    if let TraceEvent::Stmt(_, sql) = event {
        SEEN.with_borrow_mut(|seen| seen.push(sql.to_string()));
    }
}

/// A migrated database of a test's own.
fn database() -> (tempfile::TempDir, Connection) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("canopy.db");
    drop(super::Store::open(&path).unwrap());
    let conn = Connection::open(&path).unwrap();
    (dir, conn)
}

/// The plan of every statement `read` runs, as `EXPLAIN QUERY PLAN` details, one string each.
fn plans_of(conn: &Connection, read: impl FnOnce(&Connection)) -> Vec<(String, String)> {
    SEEN.with_borrow_mut(Vec::clear);
    conn.trace_v2(TraceEventCodes::SQLITE_TRACE_STMT, Some(seen));
    read(conn);
    conn.trace_v2(TraceEventCodes::empty(), None);
    let statements: Vec<String> = SEEN.with_borrow_mut(std::mem::take);
    statements
        .into_iter()
        .filter(|sql| !sql.trim_start().starts_with("--"))
        .map(|sql| {
            let mut explain = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            // No value bound: the plan of the statement as prepared.
            let mut rows = explain.raw_query();
            let mut detail: Vec<String> = Vec::new();
            while let Some(row) = rows.next().unwrap() {
                detail.push(row.get::<_, String>(3).unwrap());
            }
            (sql, detail.join(" | "))
        })
        .collect()
}

/// Asserts that each statement `read` runs on `table` seeks it (`SEARCH table ...`).
fn assert_seeks(what: &str, table: &str, conn: &Connection, read: impl FnOnce(&Connection)) {
    let plans = plans_of(conn, read);
    let on_table: Vec<&(String, String)> = plans
        .iter()
        .filter(|(sql, _)| sql.contains(table))
        .collect();
    assert!(
        !on_table.is_empty(),
        "{what}: no statement on {table}: {plans:#?}"
    );
    for (sql, plan) in on_table {
        assert!(
            plan.contains(&format!("SEARCH {table}")) && !plan.contains(&format!("SCAN {table}")),
            "{what}: `{sql}` scans {table}: {plan}"
        );
    }
}

#[test]
fn a_feed_follower_catching_up_seeks_the_primary_key() {
    let (_dir, conn) = database();
    for (what, query) in [
        (
            "after a cursor",
            FeedQuery {
                since: Some(Since::Cursor(5)),
                limit: 500,
                ..FeedQuery::default()
            },
        ),
        (
            "after a cursor, one family",
            FeedQuery {
                since: Some(Since::Cursor(5)),
                family: Some(canopy_model::events::Family::Graph),
                limit: 500,
                ..FeedQuery::default()
            },
        ),
        (
            "since a time",
            FeedQuery {
                since: Some(Since::Time("2026-01-01T00:00:00Z".parse().unwrap())),
                limit: 500,
                ..FeedQuery::default()
            },
        ),
    ] {
        assert_seeks(what, "feed", &conn, |conn| {
            Rd::over(conn).feed(&query).unwrap();
        });
    }
}

#[test]
fn hook_run_reads_by_graph_run_hook_or_time_seek_an_index() {
    let (_dir, conn) = database();
    for (what, filter) in [
        (
            "one graph",
            HookRunFilter {
                graph_id: Some("g".into()),
                ..HookRunFilter::default()
            },
        ),
        (
            "one run",
            HookRunFilter {
                run_id: Some("r".into()),
                ..HookRunFilter::default()
            },
        ),
        (
            "since a time",
            HookRunFilter {
                since: Some("2026-01-01T00:00:00.000000Z".parse().unwrap()),
                ..HookRunFilter::default()
            },
        ),
    ] {
        assert_seeks(what, "hook_runs", &conn, |conn| {
            Rd::over(conn).hook_runs(&filter).unwrap();
        });
    }
}

#[test]
fn delivery_reads_of_one_hook_seek_an_index() {
    let (_dir, conn) = database();
    let filter = DeliveryFilter {
        scope: Some("global".into()),
        hook: Some("push".into()),
        status: None,
        last: 50,
    };
    assert_seeks(
        "one hook's deliveries",
        "webhook_deliveries",
        &conn,
        |conn| {
            Rd::over(conn).list_deliveries(&filter).unwrap();
        },
    );
}

#[test]
fn cron_receipt_reads_and_their_cleanup_seek_an_index() {
    let (_dir, conn) = database();
    assert_seeks("one cron's receipts", "cron_receipts", &conn, |conn| {
        Rd::over(conn).cron_receipts("nightly", 20).unwrap();
    });
    assert_seeks("the receipt cleanup", "cron_receipts", &conn, |conn| {
        Tx::over(conn)
            .prune_cron_receipts("nightly", 100, "2026-01-01T00:00:00Z".parse().unwrap())
            .unwrap();
    });
}

#[test]
fn retention_seeks_the_time_index_of_every_table_it_prunes() {
    use super::retention::Growing;
    let (_dir, conn) = database();
    for (what, table, name) in [
        ("hook runs", Growing::HookRuns, "hook_runs"),
        ("deliveries", Growing::Deliveries, "webhook_deliveries"),
    ] {
        assert_seeks(what, name, &conn, |conn| {
            Tx::over(conn)
                .prune_before(table, "2026-01-01T00:00:00Z".parse().unwrap(), 1000)
                .unwrap();
        });
        // The row cap's cutoff walks the time index from the newest end (once a pass).
        let plans = plans_of(&conn, |conn| {
            Rd::over(conn)
                .prune_cutoff(table, "2026-01-01T00:00:00Z".parse().unwrap(), 1000)
                .unwrap();
        });
        assert!(
            plans.iter().all(|(_, plan)| plan.contains("INDEX")),
            "{what}: {plans:#?}"
        );
    }
}
