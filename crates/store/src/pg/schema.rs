//! PostgreSQL's schema. It starts where SQLite's migrations stood when PostgreSQL came
//! ([`BASELINE`]: `schema.sql` is that schema, column for column); every migration after that
//! is one step of the shared list in `migrations.rs`, written for both backends. The version
//! is kept in `canopy_schema`, and the whole migration runs under an advisory lock, so daemons
//! starting together migrate once.

use anyhow::{Result, bail};

use super::PgConn;
use crate::sql::{Conn, Queries, params};

/// The SQLite migration `schema.sql` equals.
pub(crate) const BASELINE: usize = 22;

/// The schema as of [`BASELINE`].
const SCHEMA: &str = include_str!("schema.sql");

/// The advisory lock the migration holds (any number no other tool uses: "canopy" in ASCII).
const MIGRATION_LOCK: i64 = 0x6361_6e6f_7079;

/// Brings the database's schema up to this build's, in one transaction.
pub(crate) fn migrate(conn: &PgConn) -> Result<()> {
    conn.batch("BEGIN")?;
    let migrated = migrate_in_transaction(conn);
    match migrated {
        Ok(()) => conn.batch("COMMIT")?,
        Err(err) => {
            let _ = conn.batch("ROLLBACK");
            return Err(err);
        }
    }
    Ok(())
}

fn migrate_in_transaction(conn: &PgConn) -> Result<()> {
    conn.query_row(
        "SELECT pg_advisory_xact_lock(?1)",
        params![MIGRATION_LOCK],
        |_| Ok(()),
    )?;
    conn.batch("CREATE TABLE IF NOT EXISTS canopy_schema (version BIGINT NOT NULL)")?;
    let version: Option<i64> =
        conn.query_opt("SELECT version FROM canopy_schema", params![], |row| {
            row.get(0)
        })?;
    let latest = crate::migrations::latest();
    let Some(version) = version else {
        conn.batch(SCHEMA)?;
        conn.execute(
            "INSERT INTO canopy_schema (version) VALUES (?1)",
            params![i64::try_from(BASELINE)?],
        )?;
        return catch_up(conn, BASELINE, latest);
    };
    let version = usize::try_from(version)?;
    if version > latest {
        bail!(
            "the database's schema is at version {version}, newer than this Canopy knows ({latest}): \
             another daemon sharing it runs a newer Canopy; upgrade this one"
        );
    }
    catch_up(conn, version, latest)
}

/// Applies the shared steps after `from`, up to `to`.
fn catch_up(conn: &PgConn, from: usize, to: usize) -> Result<()> {
    for version in from + 1..=to {
        let Some(step) = crate::migrations::postgres_step(version) else {
            bail!("migration {version} has no PostgreSQL form");
        };
        conn.batch(step)?;
        conn.execute(
            "UPDATE canopy_schema SET version = ?1",
            params![i64::try_from(version)?],
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::{BTreeMap, BTreeSet};

    use regex::Regex;

    use crate::Store;
    use crate::sql::{Conn, Queries, params};

    /// A table as both backends can describe it: its columns (name, type class, NOT NULL),
    /// the values its CHECKs allow, and its indexes.
    #[derive(Debug, PartialEq, Eq, Default)]
    struct Table {
        columns: BTreeSet<(String, &'static str, bool)>,
        allowed: BTreeSet<String>,
        indexes: BTreeSet<String>,
    }

    fn class(declared: &str) -> &'static str {
        match declared.to_ascii_lowercase().as_str() {
            "integer" | "bigint" => "integer",
            "text" => "text",
            "blob" | "bytea" => "blob",
            other => panic!("a column type neither backend should have: {other}"),
        }
    }

    fn quoted(check: &str) -> impl Iterator<Item = String> + '_ {
        let words = Regex::new(r"'([^']*)'").unwrap();
        words
            .captures_iter(check)
            .map(|c| c[1].to_string())
            .collect::<Vec<_>>()
            .into_iter()
    }

    fn sqlite_tables() -> BTreeMap<String, Table> {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        crate::migrations::apply(&mut conn).unwrap();
        let conn: &dyn Conn = &conn;
        let names: Vec<(String, String)> = conn
            .query_map(
                "SELECT name, sql FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
                params![],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap();
        let mut tables = BTreeMap::new();
        for (name, sql) in names {
            let mut table = Table::default();
            for (column, declared, not_null, pk) in conn
                .query_map(
                    &format!("SELECT name, type, \"notnull\", pk FROM pragma_table_info('{name}')"),
                    params![],
                    |row| {
                        Ok((
                            row.get::<String>(0)?,
                            row.get::<String>(1)?,
                            row.get::<bool>(2)?,
                            row.get::<i64>(3)?,
                        ))
                    },
                )
                .unwrap()
            {
                table
                    .columns
                    .insert((column, class(&declared), not_null || pk > 0));
            }
            for check in sql.split("CHECK").skip(1) {
                let clause = check.split(')').next().unwrap_or_default();
                table.allowed.extend(quoted(clause));
            }
            table.indexes = conn
                .query_map(
                    "SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = ?1 AND sql IS NOT NULL",
                    params![name],
                    |row| row.get(0),
                )
                .unwrap()
                .into_iter()
                .collect();
            tables.insert(name, table);
        }
        tables
    }

    fn postgres_tables(store: &Store) -> BTreeMap<String, Table> {
        store
            .read_blocking(|rd| {
                let names: Vec<String> = rd.query_map(
                    "SELECT table_name FROM information_schema.tables
                      WHERE table_schema = 'public' AND table_name <> 'canopy_schema'",
                    params![],
                    |row| row.get(0),
                )?;
                let mut tables = BTreeMap::new();
                for name in names {
                    let mut table = Table::default();
                    for (column, declared, nullable) in rd.query_map(
                        "SELECT column_name, data_type, is_nullable FROM information_schema.columns
                          WHERE table_schema = 'public' AND table_name = ?1",
                        params![name],
                        |row| {
                            Ok((
                                row.get::<String>(0)?,
                                row.get::<String>(1)?,
                                row.get::<String>(2)?,
                            ))
                        },
                    )? {
                        // `seq` is PostgreSQL's spelling of SQLite's rowid.
                        if column != "seq" {
                            table
                                .columns
                                .insert((column, class(&declared), nullable == "NO"));
                        }
                    }
                    for check in rd.query_map(
                        "SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
                          JOIN pg_class t ON t.oid = c.conrelid
                          WHERE t.relname = ?1 AND c.contype = 'c'",
                        params![name],
                        |row| row.get::<String>(0),
                    )? {
                        table.allowed.extend(quoted(&check));
                    }
                    table.indexes = rd
                        .query_map(
                            "SELECT indexname FROM pg_indexes WHERE tablename = ?1
                              AND indexname NOT LIKE '%_pkey' AND indexname NOT LIKE '%_key'",
                            params![name],
                            |row| row.get(0),
                        )?
                        .into_iter()
                        .collect();
                    tables.insert(name, table);
                }
                Ok::<_, crate::StoreError>(tables)
            })
            .unwrap()
    }

    #[test]
    fn both_backends_carry_the_same_tables_columns_checks_and_indexes() {
        let url = super::super::cluster::scratch_database().unwrap();
        let store = Store::open_postgres(&url, crate::LOCAL_NODE).unwrap();
        let sqlite = sqlite_tables();
        let postgres = postgres_tables(&store);
        assert_eq!(
            sqlite.keys().collect::<Vec<_>>(),
            postgres.keys().collect::<Vec<_>>(),
            "the two schemas have different tables"
        );
        for (name, table) in &sqlite {
            assert_eq!(Some(table), postgres.get(name), "table {name} differs");
        }
        // Opening it again finds it migrated; the version is this build's.
        drop(store);
        let again = Store::open_postgres(&url, crate::LOCAL_NODE).unwrap();
        let version: i64 = again
            .read_blocking(|rd| {
                rd.query_row("SELECT version FROM canopy_schema", params![], |row| {
                    row.get(0)
                })
                .map_err(crate::StoreError::from)
            })
            .unwrap();
        assert_eq!(
            usize::try_from(version).unwrap(),
            crate::migrations::latest()
        );
    }

    #[test]
    fn every_migration_after_the_baseline_has_a_postgres_form() {
        for version in super::BASELINE + 1..=crate::migrations::latest() {
            assert!(
                crate::migrations::postgres_step(version).is_some(),
                "migration {version} is SQLite's only: write it as a Migration::Twin"
            );
        }
    }
}
