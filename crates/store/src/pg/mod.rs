//! PostgreSQL, for several daemons sharing one database. The store's modules run on it
//! unchanged through the port (`sql.rs`); this module connects, keeps the schema, and hands
//! the connections to the same writer and read pool SQLite uses (`db.rs`): writes from this
//! daemon are group-committed on one connection, reads run on a small pool, each in one
//! snapshot.
//!
//! A database URL can hold a password: it is never logged or put in an error. Errors name the
//! user, host, port and database instead.

#[cfg(any(test, feature = "testing"))]
pub mod cluster;
mod conn;
pub mod copy;
pub mod listen;
mod schema;

use std::time::Duration;

use anyhow::{Context, Result};

pub(crate) use conn::PgConn;

use crate::db::{Db, Link, READERS};

/// How long connecting may take before it is an error.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Any one statement's limit: the store's statements take milliseconds, and one that takes
/// this long is stuck (a lock held by a daemon that hung).
const STATEMENT_TIMEOUT_MS: u64 = 30_000;

/// How long opening waits for the node lock another daemon's connection holds.
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// A connection string parsed, with what errors may name of it.
#[derive(Clone)]
pub(crate) struct Target {
    config: postgres::Config,
    /// `user@host:port/dbname`, no password.
    shown: String,
}

impl Target {
    pub(crate) fn parse(url: &str) -> Result<Self> {
        // The parser's error can quote the string, password and all: it is not passed on.
        let mut config: postgres::Config = url.parse().map_err(|_| {
            anyhow::anyhow!(
                "the database URL is not a PostgreSQL connection string \
                 (postgres://user:password@host:port/dbname, or host=... dbname=...)"
            )
        })?;
        config.connect_timeout(CONNECT_TIMEOUT);
        config.application_name("canopy");
        config.options(&format!("-c statement_timeout={STATEMENT_TIMEOUT_MS}"));
        let shown = show(&config);
        Ok(Self { config, shown })
    }

    pub(crate) fn connect(&self) -> Result<postgres::Client> {
        self.config
            .connect(postgres::NoTls)
            // The error's causes say why (refused, timed out, authentication); none holds the
            // connection string.
            .map_err(|err| {
                anyhow::Error::new(err)
                    .context(format!("cannot connect to PostgreSQL at {}", self.shown))
            })
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

fn show(config: &postgres::Config) -> String {
    let user = config.get_user().unwrap_or("(default user)");
    let host = match config.get_hosts().first() {
        Some(postgres::config::Host::Tcp(host)) => host.clone(),
        Some(postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_string(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or(user);
    format!("{user}@{host}:{port}/{db}")
}

/// Connects, brings the schema up to date, and starts the writer and the read pool.
pub(crate) fn open(url: &str, node: &str) -> Result<Db> {
    let target = Target::parse(url)?;
    let mut writer = PgConn::connect(target.clone())?;
    schema::migrate(&writer).with_context(|| format!("cannot migrate database {target}"))?;
    // A daemon of this name that just stopped may still be closing its connection: it is
    // given a moment.
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    while !writer.hold_node_lock(node)? {
        if std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        anyhow::bail!(
            "another canopy daemon named `{node}` uses the database {target}: daemons sharing a \
             database need a node name each (`node = \"...\"` in canopy.toml); stop the other \
             one, or name this one differently"
        );
    }
    let mut readers = Vec::with_capacity(READERS);
    for _ in 0..READERS {
        readers.push(Link::Postgres(Box::new(PgConn::connect(target.clone())?)));
    }
    let notices = listen::spawn(target.clone(), node)?;
    let mut db = Db::start_postgres(
        Link::Postgres(Box::new(writer)),
        readers,
        target.shown.clone(),
        node,
    )?;
    db.feed_notices = Some(notices);
    Ok(db)
}

/// A PostgreSQL connection string as it may be shown (`user@host:port/dbname`, no password);
/// an error, without the string, when it is not one.
pub fn describe(url: &str) -> Result<String> {
    Target::parse(url).map(|target| target.shown)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use crate::Store;
    use crate::sql::{Conn, Queries, params};

    /// The server drops every connection of the daemon (a restart, an administrator): the next
    /// read and the next write connect again and succeed, and nothing written before is lost.
    #[test]
    fn a_store_whose_connections_the_server_dropped_connects_again() {
        let url = super::cluster::scratch_database().unwrap();
        let store = Store::open_postgres(&url, crate::LOCAL_NODE).unwrap();
        let write = |n: i64| {
            store
                .write_blocking(move |tx| {
                    tx.execute(
                        "INSERT INTO cron_state (name, paused) VALUES (?1, ?2)",
                        params![format!("c{n}"), n],
                    )
                    .map_err(crate::StoreError::from)
                })
                .unwrap();
        };
        write(1);
        let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let dropped = admin
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                  WHERE application_name = 'canopy' AND datname = current_database()",
                &[],
            )
            .unwrap();
        assert!(
            dropped.len() >= 2,
            "the writer's and the readers' connections"
        );
        write(2);
        let names: Vec<String> = store
            .read_blocking(|rd| {
                rd.query_map(
                    "SELECT name FROM cron_state ORDER BY name",
                    params![],
                    |row| row.get(0),
                )
                .map_err(crate::StoreError::from)
            })
            .unwrap();
        assert_eq!(names, ["c1", "c2"]);
    }
}
