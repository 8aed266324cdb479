//! Moving a single-machine install to PostgreSQL: every row of a data dir's `canopy.db`
//! copied into an empty PostgreSQL database, in one transaction (all of it lands, or none),
//! then counted on both sides and spot-checked.
//!
//! The two schemas carry the same tables and columns (a test holds them to it), so a table
//! is copied column by column as the store's values, with no knowledge of what it holds.
//! Rows go in in SQLite's rowid order, so PostgreSQL's `seq` (its insertion order) follows
//! it; the feed keeps its cursors, and its identity goes on after the last one.
//! `run_spec_tally` is not copied: PostgreSQL's triggers count it again from `run_specs`.

use std::path::Path;

use anyhow::{Context, Result, bail};
use rusqlite::{Connection, OpenFlags};

use super::{PgConn, Target};
use crate::sql::{BoxError, Conn, FromSql, Queries, ToSql, Value, params};

/// The tables in an order that inserts no row before the row it refers to.
const TABLES: [&str; 22] = [
    "compiled_artifacts",
    "plugins",
    "plugin_components",
    "specs",
    "graphs",
    "graph_specs",
    "queues",
    "queue_members",
    "runs",
    "run_specs",
    "node_runs",
    "hook_runs",
    "feed",
    "sessions",
    "messages",
    "notifications",
    "cron_receipts",
    "cron_state",
    "cron_marks",
    "webhook_deliveries",
    "project_state",
    "project_tags",
];

/// Tables kept by triggers from others, not copied.
const DERIVED: [&str; 1] = ["run_spec_tally"];
/// Tables of the old database alone: the daemons that used it are not daemons of the new one.
const NOT_COPIED: [&str; 1] = ["nodes"];

/// What was copied: each table's rows, as counted on both sides after the copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    pub tables: Vec<(String, u64)>,
    /// The SQLite file copied from.
    pub source: String,
    /// The database copied into, as it may be shown.
    pub target: String,
}

impl Copied {
    pub fn rows(&self) -> u64 {
        self.tables.iter().map(|(_, n)| n).sum()
    }
}

/// A value read as it is, to be bound again.
struct Any(Value<'static>);

impl FromSql for Any {
    fn from_sql(value: Value<'_>) -> Result<Self, BoxError> {
        Ok(Self(match value {
            Value::Null => Value::Null,
            Value::Integer(n) => Value::Integer(n),
            Value::Real(x) => Value::Real(x),
            Value::Text(text) => Value::Text(text.into_owned().into()),
            Value::Blob(blob) => Value::Blob(blob.into_owned().into()),
        }))
    }
}

impl ToSql for Any {
    fn to_sql(&self) -> Result<Value<'_>, BoxError> {
        Ok(self.0.clone())
    }
}

/// Copies the SQLite database at `sqlite` (brought to this build's schema first) into the
/// empty PostgreSQL database `url`. `progress` hears each table as it is copied. Refused,
/// with nothing written, when the target holds any row.
pub fn sqlite_to_postgres(
    sqlite: &Path,
    url: &str,
    mut progress: impl FnMut(&str, u64),
) -> Result<Copied> {
    if !sqlite.is_file() {
        bail!("no database at {}", sqlite.display());
    }
    // Brought up to date (and closed) by the store's own open, then read alone.
    drop(crate::Store::open(sqlite)?);
    let source = Connection::open_with_flags(sqlite, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .with_context(|| format!("cannot open {}", sqlite.display()))?;
    let source_tables: Vec<String> = Queries::query_map(
        &source,
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
        params![],
        |row| row.get(0),
    )?;
    for table in &source_tables {
        anyhow::ensure!(
            TABLES.contains(&table.as_str())
                || DERIVED.contains(&table.as_str())
                || NOT_COPIED.contains(&table.as_str()),
            "table {table} is not one this copy knows: a newer schema than this canopy's"
        );
    }
    let target = Target::parse(url)?;
    drop(crate::Store::open_postgres(url, crate::LOCAL_NODE)?);
    let dest = PgConn::connect(target.clone())?;
    for table in TABLES {
        let any: bool = dest.query_row(
            &format!("SELECT EXISTS (SELECT 1 FROM {table})"),
            params![],
            |row| row.get(0),
        )?;
        if any {
            bail!(
                "the database {target} is not empty (table {table} has rows): copy into a new, empty database"
            );
        }
    }
    // The copy and its check in one transaction: a check that fails leaves the target empty.
    dest.batch("BEGIN")?;
    let copied = copy_tables(&source, &dest, &mut progress).and_then(|()| check(&source, &dest));
    let tables = match copied {
        Ok(tables) => {
            dest.batch("COMMIT")?;
            tables
        }
        Err(err) => {
            let _ = dest.batch("ROLLBACK");
            return Err(err);
        }
    };
    Ok(Copied {
        tables,
        source: sqlite.display().to_string(),
        target: target.to_string(),
    })
}

fn columns(source: &Connection, table: &str) -> Result<Vec<String>> {
    Ok(Queries::query_map(
        source,
        &format!("SELECT name FROM pragma_table_info('{table}') ORDER BY cid"),
        params![],
        |row| row.get(0),
    )?)
}

fn copy_tables(
    source: &Connection,
    dest: &PgConn,
    progress: &mut dyn FnMut(&str, u64),
) -> Result<()> {
    for table in TABLES {
        let columns = columns(source, table)?;
        let names = columns.join(", ");
        let marks: Vec<String> = (1..=columns.len()).map(|i| format!("?{i}")).collect();
        // The feed's ids are its cursors: kept as they are.
        let overriding = if table == "feed" {
            " OVERRIDING SYSTEM VALUE"
        } else {
            ""
        };
        let insert = format!(
            "INSERT INTO {table} ({names}){overriding} VALUES ({})",
            marks.join(", ")
        );
        let mut copied = 0_u64;
        let mut failed: Option<anyhow::Error> = None;
        Conn::query(
            source,
            &format!("SELECT {names} FROM {table} ORDER BY rowid"),
            params![],
            &mut |row| {
                let values = (0..columns.len())
                    .map(|i| row.get::<Any>(i))
                    .collect::<crate::sql::Result<Vec<Any>>>()?;
                let bound: Vec<&dyn ToSql> = values.iter().map(|v| v as &dyn ToSql).collect();
                if let Err(err) = dest.execute(&insert, &bound) {
                    failed = Some(
                        anyhow::Error::new(err)
                            .context(format!("cannot copy row {} of table {table}", copied + 1)),
                    );
                    return Ok(false);
                }
                copied += 1;
                Ok(true)
            },
        )?;
        if let Some(err) = failed {
            return Err(err);
        }
        progress(table, copied);
    }
    // The feed's next cursor comes after the last one copied.
    dest.batch(
        "SELECT setval(pg_get_serial_sequence('feed', 'id'), COALESCE((SELECT MAX(id) FROM feed), 0) + 1, false)",
    )?;
    Ok(())
}

/// Counts every table on both sides, and reads back the newest feed row and hook run of the
/// target to compare with the source's: the copy's proof.
fn check(source: &Connection, dest: &PgConn) -> Result<Vec<(String, u64)>> {
    let mut counts = Vec::new();
    for table in TABLES.iter().chain(DERIVED.iter()) {
        // A tally row counted down to 0 stays in SQLite; PostgreSQL's count made none.
        let count = if DERIVED.contains(table) {
            format!("SELECT COUNT(*) FROM {table} WHERE specs > 0")
        } else {
            format!("SELECT COUNT(*) FROM {table}")
        };
        let here: i64 = Queries::query_row(source, &count, params![], |row| row.get(0))?;
        let there: i64 = dest.query_row(&count, params![], |row| row.get(0))?;
        if here != there {
            bail!("table {table}: {here} rows in SQLite, {there} in PostgreSQL after the copy");
        }
        counts.push((table.to_string(), u64::try_from(here).unwrap_or(0)));
    }
    for (table, newest_first) in [
        ("feed", "id DESC"),
        ("hook_runs", "fired_at DESC, id DESC"),
        ("runs", "started_at DESC, id DESC"),
    ] {
        let columns = columns(source, table)?.join(", ");
        let newest = format!("SELECT {columns} FROM {table} ORDER BY {newest_first} LIMIT 1");
        let width = columns.split(", ").count();
        let read = |row: &crate::sql::Row<'_>| -> crate::sql::Result<Vec<Value<'static>>> {
            (0..width).map(|i| row.get::<Any>(i).map(|a| a.0)).collect()
        };
        let here = Queries::query_opt(source, &newest, params![], read)?;
        let there = dest.query_opt(&newest, params![], read)?;
        if here != there {
            bail!("the newest row of {table} differs after the copy");
        }
    }
    Ok(counts)
}
