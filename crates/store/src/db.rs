//! The SQLite backend's machinery: one writer thread that group-commits, and a small pool of
//! read connections. Nothing here blocks a tokio worker: callers await a oneshot answer.
//!
//! **Writes.** Every write is a closure sent over a bounded channel to the writer thread. The
//! writer takes whatever has queued up (up to [`MAX_BATCH`]) and runs it in one transaction,
//! each closure inside its own savepoint (a write alone needs none): a closure that fails is
//! rolled back alone, the others commit together. Every caller is answered only after `COMMIT`
//! returns, so an acknowledged write is durable; under load many small writes share one commit
//! instead of paying one each. After a batch with a graph driver's write in it the writer looks
//! for the next write for [`WRITER_SPIN`] before it sleeps: the driver writes again within
//! that, and on a small VM waking a sleeping thread costs as much as the write. After other
//! batches it sleeps at once: their callers do not write again at once, and the spin only
//! took cores from them.
//!
//! A graph's driver waits on each of its writes with nothing else to do; its writes are
//! *watched* ([`Db::write`]): while no other write is awaited, its task looks for the answer
//! for [`ANSWER_SPIN`] before sleeping, so a step does not pay for waking a parked worker.
//!
//! **Reads.** A read takes a permit for one of [`READERS`] connections and runs on tokio's
//! blocking pool. In WAL mode readers never wait for the writer and see every committed write.

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::StoreError;
use crate::sql::{Conn, Named, Params, Row};

/// Read connections kept open.
pub const READERS: usize = 4;
/// Writes committed together at most.
pub const MAX_BATCH: usize = 512;
/// The writer's page cache, in KiB (as a negative `cache_size`).
const WRITER_CACHE_KIB: i64 = -64 * 1024;
/// How long the writer keeps looking for the next write before it sleeps, after a batch that
/// held a graph driver's write. A driver's next write usually comes within this (its executor
/// call and hand-off in between, and the sync hooks asked before the call); waking a sleeping
/// thread costs about as much again on a small VM. At 250 µs a node with one sync hook on
/// `node.pre_dispatch` came back after the writer had gone to sleep: 1 ms took about 80 µs off
/// each such dispatch (2,000 µs was worse again: the spin took a core from the work). After a
/// batch of other writes it sleeps at once: a webhook's deliveries gained 7% accepted requests a
/// second from that, and 20 µs of the writer's CPU per waited delivery.
const WRITER_SPIN: Duration = Duration::from_micros(1000);
/// How long a watched write (see [`Db::write`]) that is the only one awaited looks for its
/// answer before its task sleeps. A parked tokio worker woken by the writer's answer took
/// about 95 µs to run again on this project's 2-core VM, a fifth of a graph driver's step.
/// With other writes awaited the writer is busy for longer, and their tasks sleep at once; so
/// do unwatched writes, whose callers run other work beside them (a webhook's handler process
/// lost a fifth of its pace to tasks looking for their answers).
const ANSWER_SPIN: Duration = Duration::from_micros(500);
/// Writes that may wait for the writer; a caller beyond that waits to enqueue (backpressure).
const WRITE_QUEUE: usize = 4096;

/// Read access to the database, inside one read transaction or one write savepoint.
/// The store's modules add their queries to it; nothing outside this crate sees the connection.
pub struct Rd<'a> {
    conn: &'a dyn Conn,
    sqlite: Option<&'a Connection>,
    node: &'a str,
}

impl<'a> Rd<'a> {
    fn of(link: &'a Link, node: &'a str) -> Self {
        match link {
            Link::Sqlite(conn) => Self {
                conn,
                sqlite: Some(conn),
                node,
            },
            Link::Postgres(conn) => Self {
                conn: &**conn,
                sqlite: None,
                node,
            },
        }
    }

    /// The node this store works for: the daemon's `node` name. What it claims (a run's lease,
    /// a hook run, a cron's schedule) is recorded under it, and what it recovers at start is
    /// its own.
    pub fn node(&self) -> &'a str {
        self.node
    }

    /// Whether this store's daemon is the only one on its database, and so owns every claim in
    /// it whatever node name made it: SQLite, which one daemon uses (its data dir's lock says
    /// so). A daemon whose host name changed between two starts (a container's) recovers what
    /// it left under the old name.
    pub fn exclusive(&self) -> bool {
        self.conn.dialect() == crate::sql::Dialect::Sqlite
    }

    /// The SQLite connection itself, for what only SQLite has (its pragmas, its file's pages):
    /// every query goes through [`Conn`]. `None` on PostgreSQL.
    pub(super) fn sqlite(&self) -> Option<&'a Connection> {
        self.sqlite
    }

    /// Reads over a connection of a test's own.
    #[cfg(test)]
    pub(super) fn over(conn: &'a Connection) -> Self {
        Self {
            conn,
            sqlite: Some(conn),
            node: crate::LOCAL_NODE,
        }
    }
}

/// A connection of either backend: the writer's or a reader's.
pub(crate) enum Link {
    Sqlite(Connection),
    Postgres(Box<crate::pg::PgConn>),
}

impl Link {
    fn conn(&self) -> &dyn Conn {
        match self {
            Self::Sqlite(conn) => conn,
            Self::Postgres(conn) => &**conn,
        }
    }

    /// Runs a statement that takes no values (a transaction's begin, savepoint and end),
    /// prepared once.
    fn run(&self, sql: &str) -> crate::sql::Result<()> {
        self.conn().execute(sql, &[]).map(|_| ())
    }

    /// Runs statements that take no values, in order, stopping at the first that fails: on
    /// PostgreSQL in one round trip (a transaction's statements between two writes).
    fn run_all(&self, sql: &[&str]) -> crate::sql::Result<()> {
        match self {
            Self::Postgres(conn) if sql.len() > 1 => conn.batch(&sql.join("; ")),
            _ => sql.iter().try_for_each(|one| self.run(one)),
        }
    }

    /// After a connection failed: a PostgreSQL link whose server went away connects again
    /// (once; the next statement tells whether that held).
    fn heal(&mut self) {
        if let Self::Postgres(conn) = self {
            conn.heal();
        }
    }
}

/// The store's modules run their statements through the port; SQLite parses each once per
/// connection and keeps it cached by its text (parsing was an eighth of the writer's time).
impl Conn for Rd<'_> {
    fn dialect(&self) -> crate::sql::Dialect {
        self.conn.dialect()
    }

    fn execute(&self, sql: &str, params: Params<'_>) -> crate::sql::Result<usize> {
        self.conn.execute(sql, params)
    }

    fn query(
        &self,
        sql: &str,
        params: Params<'_>,
        each: &mut dyn FnMut(&Row<'_>) -> crate::sql::Result<bool>,
    ) -> crate::sql::Result<()> {
        self.conn.query(sql, params, each)
    }

    fn query_named(
        &self,
        sql: &str,
        params: Named<'_>,
        each: &mut dyn FnMut(&Row<'_>) -> crate::sql::Result<bool>,
    ) -> crate::sql::Result<()> {
        self.conn.query_named(sql, params, each)
    }
}

/// Write access: everything [`Rd`] can do, plus the store's writes. All writes made through
/// one `Tx` are committed together or not at all.
pub struct Tx<'a> {
    rd: Rd<'a>,
    /// Whether this transaction has run what precedes its feed rows (see
    /// `Dialect::feed_append`): once is enough.
    feed_prelude: std::cell::Cell<bool>,
}

impl<'a> Tx<'a> {
    fn of(rd: Rd<'a>) -> Self {
        Self {
            rd,
            feed_prelude: std::cell::Cell::new(false),
        }
    }

    /// Writes over a connection of a test's own (no savepoint: the test owns the connection).
    #[cfg(test)]
    pub(super) fn over(conn: &'a Connection) -> Self {
        Self::of(Rd::over(conn))
    }

    /// Whether the caller must run what precedes this transaction's first feed row (see
    /// `Dialect::feed_append`); noted as run.
    pub(crate) fn feed_prelude_due(&self) -> bool {
        !self.feed_prelude.replace(true)
    }

    /// After that statement failed, or a savepoint it ran in was rolled back (which drops
    /// its notice): `ran` is whether it still counts as run.
    pub(crate) fn feed_prelude_ran(&self, ran: bool) {
        self.feed_prelude.set(ran);
    }
}

impl<'a> std::ops::Deref for Tx<'a> {
    type Target = Rd<'a>;
    fn deref(&self) -> &Rd<'a> {
        &self.rd
    }
}

/// What a write closure hands back to the writer: whether to keep its writes, and how to
/// answer its caller once the batch's commit is known.
struct Ran {
    keep: bool,
    answer: Answer,
}

/// Answers a write's caller, given why the batch's commit failed (if it did).
type Answer = Box<dyn FnOnce(Option<&str>) + Send>;

type Job = Box<dyn FnOnce(&Tx<'_>) -> Ran + Send>;

/// A write on its way to the writer, and whether its caller is a graph's driver (see
/// [`Db::write`]), whose next write comes soon.
struct Queued {
    job: Job,
    watched: bool,
}

/// What the writer has done: how many writes, in how many commits (the group commit's
/// batches; a benchmark reports the writes per commit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    pub writes: u64,
    pub commits: u64,
}

/// The writer's running counts, shared with the store's handles.
#[derive(Default)]
struct Counts {
    writes: AtomicU64,
    commits: AtomicU64,
}

pub(super) struct Db {
    /// SQLite's file and its checkpointer; `None` on PostgreSQL.
    file: Option<SqliteFile>,
    /// The PostgreSQL database, as it may be shown; `None` on SQLite.
    pub(crate) postgres: Option<String>,
    /// The node this store works for (see [`Rd::node`]).
    node: Arc<str>,
    /// On PostgreSQL: woken when any daemon appended to the feed (see `pg::listen`).
    pub(crate) feed_notices: Option<crate::pg::listen::FeedNotices>,
    /// Writes sent and not answered yet (see [`ANSWER_SPIN`]).
    awaited: std::sync::atomic::AtomicUsize,
    counts: Arc<Counts>,
    writes: mpsc::Sender<Queued>,
    readers: Arc<Readers>,
    permits: Arc<Semaphore>,
}

/// SQLite's database file, and what its checkpointer needs.
struct SqliteFile {
    path: std::path::PathBuf,
    /// Tells the checkpointer to stop when the store goes away.
    stop: Arc<std::sync::atomic::AtomicBool>,
    /// Held by the checkpointer for each of its passes (see [`Rewinder`]).
    passes: Arc<Mutex<()>>,
}

/// The read connections not in use, and a wait for one to come back.
struct Readers {
    idle: Mutex<Vec<Link>>,
    returned: Condvar,
}

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // In WAL mode NORMAL loses nothing when the daemon is killed; only a power loss can drop
    // the last commits.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.busy_handler(Some(wait_when_busy))?;
    // A write's savepoint journal stays in memory instead of a temp file.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.set_prepared_statement_cache_capacity(256);
    // Plans do not depend on bound values. Without this SQLite marks every statement with a
    // bound `LIMIT ?` as depending on it and compiles the statement again at each use: a
    // profile of `graph get` spent 13% of the daemon's time re-preparing cached statements.
    // The store has no planner statistics and no `LIKE ?`, whose plans bound values could
    // improve.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    Ok(())
}

/// SQLite's own busy timeout sleeps 1, 2, 5, 10 ms ... between tries: one wait for the
/// checkpointer's instant of rewinding the WAL cost a write milliseconds. This handler tries
/// again every 50 µs for the first millisecond, then every millisecond, for 5 s in all; past
/// that the statement fails with `SQLITE_BUSY`.
fn wait_when_busy(tries: i32) -> bool {
    const QUICK_TRIES: i32 = 20;
    const TRIES: i32 = QUICK_TRIES + 5_000;
    match tries {
        t if t < QUICK_TRIES => std::thread::sleep(Duration::from_micros(50)),
        t if t < TRIES => std::thread::sleep(Duration::from_millis(1)),
        _ => return false,
    }
    true
}

/// The checkpointer's (and the rewind's) busy handler: 40 tries 50 µs apart (2 ms), then it
/// gives up.
fn wait_briefly_when_busy(tries: i32) -> bool {
    if tries >= 40 {
        return false;
    }
    std::thread::sleep(Duration::from_micros(50));
    true
}

/// How often the checkpointer copies the WAL back into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(50);

/// WAL bytes past which the log is rewound. A passive checkpoint copies frames back but never
/// rewinds the log while writes keep coming (a flood of webhook deliveries grew it to 780 MB);
/// past 64 MiB the writer copies the rest back and starts the log over between two batches.
const WAL_REWIND_BYTES: u64 = if cfg!(test) { 1 << 20 } else { 64 << 20 };

/// How large the WAL file may stay once the log starts over (SQLite's `journal_size_limit`):
/// a log rewound at [`WAL_REWIND_BYTES`] reuses its file and never reaches this, and a file a
/// held-up rewind let grow past it is cut back to it.
const WAL_KEPT_BYTES: u64 = 2 * WAL_REWIND_BYTES;

thread_local! {
    /// Frames in the WAL after the writer's last commit (set by SQLite's WAL hook on the
    /// writer's thread, the only one that commits on its connection).
    static WAL_FRAMES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The writer's WAL hook: notes how many frames the log holds after each commit.
fn note_wal_frames(_wal: &rusqlite::hooks::Wal, frames: std::ffi::c_int) -> rusqlite::Result<()> {
    WAL_FRAMES.with(|count| count.set(u64::try_from(frames).unwrap_or(0)));
    Ok(())
}

/// Checkpoints the WAL on its own thread and connection, so the writer never pays for a
/// checkpoint (and its fsync) inside a commit. Stops once `stop` is set.
fn checkpoint_loop(
    conn: Connection,
    stop: Arc<std::sync::atomic::AtomicBool>,
    passes: Arc<Mutex<()>>,
) {
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(CHECKPOINT_EVERY);
        let _pass = passes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(err) = checkpoint(&conn, "PASSIVE") {
            tracing::debug!(%err, "a WAL checkpoint did not run; the next one will");
        }
    }
}

/// The writer's watch on the WAL's length: past [`WAL_REWIND_BYTES`] it rewinds the log
/// between two batches (the only moment the write lock is surely free). A rewind waits for the
/// checkpointer's pass to end (`passes`), so only readers can hold it up: after one that was
/// held up it tries again 2 ms later, then 4, 8 ... up to [`CHECKPOINT_EVERY`], so a reader
/// that keeps old frames for long is not asked every batch.
///
/// The length is counted in frames, from SQLite's WAL hook after each of the writer's commits:
/// a rewound log keeps its file (see [`rewind_wal`]), so the file's length says nothing.
struct Rewinder {
    /// The length of the log, in frames, past which it is rewound.
    rewind_frames: u64,
    /// Held by the checkpointer for each pass: a rewind that met one failed, and under load
    /// the log then grew by tens of MB before the next try.
    passes: Arc<Mutex<()>>,
    not_before: std::time::Instant,
    /// Rewinds held up in a row.
    held_up: u32,
}

impl Rewinder {
    /// Watches the log of `writer`'s database (`writer` must not set `wal_autocheckpoint`
    /// afterwards: that replaces the WAL hook).
    fn new(writer: &Connection, passes: Arc<Mutex<()>>) -> rusqlite::Result<Self> {
        let page: u64 = writer.pragma_query_value(None, "page_size", |row| row.get(0))?;
        // Each frame is a page and its 24-byte header.
        let rewind_frames = WAL_REWIND_BYTES / (page + 24);
        writer.pragma_update(None, "journal_size_limit", WAL_KEPT_BYTES)?;
        writer.wal_hook(Some(note_wal_frames));
        Ok(Self {
            rewind_frames,
            passes,
            not_before: std::time::Instant::now(),
            held_up: 0,
        })
    }

    /// After a batch, on the writer's thread: rewinds the WAL if it is too long.
    fn after_batch(&mut self, conn: &Connection) {
        let long = WAL_FRAMES.with(std::cell::Cell::get) > self.rewind_frames;
        if !long || std::time::Instant::now() < self.not_before {
            return;
        }
        let rewound = {
            let _pass = self
                .passes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            rewind_wal(conn)
        };
        if rewound {
            self.held_up = 0;
            // The log starts over at the next commit, whose hook counts it afresh.
            WAL_FRAMES.with(|count| count.set(0));
        } else {
            let wait = Duration::from_millis(2 << self.held_up.min(5)).min(CHECKPOINT_EVERY);
            self.not_before = std::time::Instant::now() + wait;
            self.held_up = self.held_up.saturating_add(1);
        }
    }
}

/// Copies what is left of the WAL back and has the next commit start the log over from the
/// head of its file, on the writer's connection between two batches; false when readers still
/// on old frames kept it from finishing (they are waited for 2 ms at most).
///
/// The file is reused, not truncated (`RESTART`, not `TRUNCATE`): cutting a 64 MiB log and
/// growing it again made each rewind hold the writer about 30 ms on this project's VM (the
/// blocks freed, then allocated again), against well under 5 ms for a restart.
fn rewind_wal(conn: &Connection) -> bool {
    if let Err(err) = conn.busy_handler(Some(wait_briefly_when_busy)) {
        tracing::debug!(%err, "cannot set the rewind's busy handler");
        return false;
    }
    // RESTART answers SQLITE_BUSY in its first column when readers kept it from finishing.
    let rewound = match conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |row| {
        row.get::<_, i64>(0)
    }) {
        Ok(busy) => busy == 0,
        Err(err) => {
            tracing::debug!(%err, "the WAL could not be rewound; the writer tries again later");
            false
        }
    };
    if let Err(err) = conn.busy_handler(Some(wait_when_busy)) {
        tracing::error!(%err, "cannot restore the writer's busy handler");
    }
    rewound
}

/// Runs one checkpoint; returns the WAL's frames and how many of them are in the database.
fn checkpoint(conn: &Connection, mode: &str) -> rusqlite::Result<(i64, i64)> {
    conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |row| {
        Ok((row.get(1)?, row.get(2)?))
    })
}

impl Db {
    /// Opens the writer (migrating the schema first) and the read pool.
    pub(super) fn open(
        path: &Path,
        node: &str,
        migrate: impl FnOnce(&mut Connection) -> Result<()>,
    ) -> Result<Self> {
        super::allocator::configure();
        let mut writer = Connection::open(path)
            .with_context(|| format!("cannot open database {}", path.display()))?;
        configure(&writer).with_context(|| format!("cannot configure {}", path.display()))?;
        migrate(&mut writer)
            .with_context(|| format!("cannot migrate database {}", path.display()))?;
        let mut readers = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            let conn = Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .with_context(|| format!("cannot open database {}", path.display()))?;
            configure(&conn)?;
            conn.pragma_update(None, "query_only", "ON")?;
            readers.push(Link::Sqlite(conn));
        }
        // The writer never checkpoints; the checkpointer does, off its path.
        writer.pragma_update(None, "wal_autocheckpoint", 0)?;
        // Every write goes through this one connection: a page cache of 64 MiB (SQLite's
        // default is 2 MiB) keeps the indexes writes touch in memory instead of read again.
        writer.pragma_update(None, "cache_size", WRITER_CACHE_KIB)?;
        let checkpointer = Connection::open(path)
            .with_context(|| format!("cannot open database {}", path.display()))?;
        configure(&checkpointer)?;
        // The checkpointer never holds up a write: a passive checkpoint takes no write lock,
        // and it waits 2 ms at most for another checkpoint (the writer's rewind).
        checkpointer.busy_handler(Some(wait_briefly_when_busy))?;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let passes = Arc::new(Mutex::new(()));
        // Its WAL hook counts the frames of each commit on the thread that commits: the
        // writer's, from here on.
        let rewinder = Rewinder::new(&writer, passes.clone())
            .with_context(|| format!("cannot watch the WAL of {}", path.display()))?;
        let stopping = stop.clone();
        std::thread::Builder::new()
            .name("canopy-store-checkpoint".into())
            .spawn({
                let passes = passes.clone();
                move || checkpoint_loop(checkpointer, stopping, passes)
            })
            .context("cannot start the store's checkpoint thread")?;
        let file = SqliteFile {
            path: path.to_path_buf(),
            stop,
            passes,
        };
        Self::start(
            Link::Sqlite(writer),
            readers,
            Some(rewinder),
            Some(file),
            node,
        )
    }

    /// A store over PostgreSQL connections (see `pg`): no file to checkpoint.
    pub(crate) fn start_postgres(
        writer: Link,
        readers: Vec<Link>,
        shown: String,
        node: &str,
    ) -> Result<Self> {
        let mut db = Self::start(writer, readers, None, None, node)?;
        db.postgres = Some(shown);
        Ok(db)
    }

    /// Starts the writer thread over `writer` and keeps `readers` for reads.
    fn start(
        writer: Link,
        readers: Vec<Link>,
        rewinder: Option<Rewinder>,
        file: Option<SqliteFile>,
        node: &str,
    ) -> Result<Self> {
        let (writes, queue) = mpsc::channel(WRITE_QUEUE);
        let counts = Arc::new(Counts::default());
        let counting = counts.clone();
        let node: Arc<str> = Arc::from(node);
        let writing_for = node.clone();
        std::thread::Builder::new()
            .name("canopy-store-writer".into())
            .spawn(move || write_loop(writer, queue, rewinder, &counting, &writing_for))
            .context("cannot start the store's writer thread")?;
        let permits = readers.len();
        Ok(Self {
            file,
            postgres: None,
            node,
            feed_notices: None,
            awaited: std::sync::atomic::AtomicUsize::new(0),
            counts,
            writes,
            readers: Arc::new(Readers {
                idle: Mutex::new(readers),
                returned: Condvar::new(),
            }),
            permits: Arc::new(Semaphore::new(permits)),
        })
    }

    /// Writes sent and not answered yet.
    #[cfg(test)]
    pub(super) fn awaited_writes(&self) -> usize {
        self.awaited.load(Ordering::Relaxed)
    }

    /// Copies the whole WAL back into the database file and empties the log, on a connection of
    /// its own: the store's last act. The checkpointer stops first, and its pass in progress is
    /// waited for (it ends with an fsync, which took over a second on a disk busy with other
    /// daemons); then a read in progress is waited for up to 5 s. False when one outlasted
    /// that, and the log stays as it was (nothing is lost either way).
    /// PostgreSQL keeps its own log: true at once.
    pub(super) fn empty_log(&self) -> rusqlite::Result<bool> {
        let Some(file) = &self.file else {
            return Ok(true);
        };
        file.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _no_pass = file
            .passes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let conn = Connection::open(&file.path)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        // TRUNCATE answers SQLITE_BUSY in its first column when something kept it from finishing.
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
            row.get::<_, i64>(0)
        })
        .map(|busy| busy == 0)
    }

    /// The node this store works for.
    pub(super) fn node(&self) -> &str {
        &self.node
    }

    pub(super) fn writer_stats(&self) -> WriterStats {
        WriterStats {
            writes: self.counts.writes.load(Ordering::Relaxed),
            commits: self.counts.commits.load(Ordering::Relaxed),
        }
    }

    /// Sends a write and awaits its answer. `watch`: the caller has nothing else to do until
    /// then (a graph's driver); when no other write is awaited, its task looks for the answer
    /// for [`ANSWER_SPIN`] before it sleeps.
    pub(super) async fn write<T, E>(
        &self,
        work: impl FnOnce(&Tx<'_>) -> Result<T, E> + Send + 'static,
        watch: bool,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        let (job, mut answer) = write_job(work);
        if self
            .writes
            .send(Queued {
                job,
                watched: watch,
            })
            .await
            .is_err()
        {
            return Err(StoreError::Closed.into());
        }
        let awaiting = Awaiting::begin(&self.awaited);
        if watch
            && awaiting.alone
            && let Some(result) = answer_soon(&mut answer).await
        {
            return result;
        }
        answer.await.unwrap_or(Err(StoreError::Lost.into()))
    }

    /// [`Db::write`] for a caller outside the async runtime (start-up, tests, tools).
    pub(super) fn write_blocking<T, E>(
        &self,
        work: impl FnOnce(&Tx<'_>) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        let (job, answer) = write_job(work);
        let queued = Queued {
            job,
            watched: false,
        };
        if self.writes.blocking_send(queued).is_err() {
            return Err(StoreError::Closed.into());
        }
        answer
            .blocking_recv()
            .unwrap_or(Err(StoreError::Lost.into()))
    }

    pub(super) async fn read<T, E>(
        &self,
        work: impl FnOnce(&Rd<'_>) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        let Ok(permit) = self.permits.clone().acquire_owned().await else {
            return Err(StoreError::Closed.into());
        };
        let readers = self.readers.clone();
        let node = self.node.clone();
        let ran = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let mut conn = pop(&readers)?;
            let result = run_read(&mut conn, &node, work);
            push(&readers, conn);
            result
        })
        .await;
        match ran {
            Ok(result) => result,
            Err(err) => {
                Err(StoreError::Internal(anyhow::anyhow!("a store read failed: {err}")).into())
            }
        }
    }

    /// [`Db::read`] for a caller outside the async runtime.
    pub(super) fn read_blocking<T, E>(
        &self,
        work: impl FnOnce(&Rd<'_>) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        let mut conn = pop(&self.readers)?;
        let result = run_read(&mut conn, &self.node, work);
        push(&self.readers, conn);
        result
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Some(file) = &self.file {
            file.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Takes an idle read connection, waiting for one while all are in use. Async readers hold
/// a permit first, so they only wait here behind blocking readers (tests, the artifact cache).
fn pop(readers: &Readers) -> Result<Link, StoreError> {
    let mut idle = readers
        .idle
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        if let Some(conn) = idle.pop() {
            return Ok(conn);
        }
        let (guard, waited) = readers
            .returned
            .wait_timeout(idle, Duration::from_secs(30))
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        idle = guard;
        if waited.timed_out() && idle.is_empty() {
            return Err(StoreError::Internal(anyhow::anyhow!(
                "no read connection came free within 30 s"
            )));
        }
    }
}

fn push(readers: &Readers, conn: Link) {
    readers
        .idle
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(conn);
    readers.returned.notify_one();
}

/// Runs `work` in one read transaction, so everything it reads is one consistent snapshot.
fn run_read<T, E>(
    conn: &mut Link,
    node: &str,
    work: impl FnOnce(&Rd<'_>) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<StoreError>,
{
    let begin = conn.conn().dialect().begin_read();
    if let Err(err) = conn.run(begin) {
        // A PostgreSQL server that went away (a restart): connect again and try once more.
        conn.heal();
        conn.run(begin).map_err(|_| E::from(err.into()))?;
    }
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| work(&Rd::of(conn, node))));
    // A read transaction has nothing to keep; ending it can only fail if it already ended.
    let _ = conn.run("COMMIT");
    match result {
        Ok(result) => result,
        Err(panic) => Err(E::from(StoreError::Internal(anyhow::anyhow!(
            "a store read panicked: {}",
            panic_text(&panic)
        )))),
    }
}

fn write_job<T, E>(
    work: impl FnOnce(&Tx<'_>) -> Result<T, E> + Send + 'static,
) -> (Job, oneshot::Receiver<Result<T, E>>)
where
    T: Send + 'static,
    E: From<StoreError> + Send + 'static,
{
    let (reply, answer) = oneshot::channel();
    let job: Job = Box::new(move |tx| {
        let result = match std::panic::catch_unwind(AssertUnwindSafe(|| work(tx))) {
            Ok(result) => result,
            Err(panic) => Err(E::from(StoreError::Internal(anyhow::anyhow!(
                "a store write panicked: {}",
                panic_text(&panic)
            )))),
        };
        let keep = result.is_ok();
        Ran {
            keep,
            answer: Box::new(move |commit_failed: Option<&str>| {
                let result = match (commit_failed, result) {
                    (Some(why), Ok(_)) => Err(E::from(StoreError::Internal(anyhow::anyhow!(
                        "the write was not committed: {why}"
                    )))),
                    (_, result) => result,
                };
                // The caller may have gone away (a dropped request); the write stands.
                let _ = reply.send(result);
            }),
        }
    });
    (job, answer)
}

/// One write awaited, counted in [`Db::awaited`] until its caller has the answer or gives up.
struct Awaiting<'a> {
    count: &'a std::sync::atomic::AtomicUsize,
    /// No other write was awaited when this one was sent.
    alone: bool,
}

impl<'a> Awaiting<'a> {
    fn begin(count: &'a std::sync::atomic::AtomicUsize) -> Self {
        let alone = count.fetch_add(1, Ordering::Relaxed) == 0;
        Self { count, alone }
    }
}

impl Drop for Awaiting<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Looks for a write's answer for [`ANSWER_SPIN`] without parking the task's worker, letting
/// the worker's other tasks and the writer's thread run in between; `None` once that is up.
async fn answer_soon<T, E>(answer: &mut oneshot::Receiver<Result<T, E>>) -> Option<Result<T, E>>
where
    E: From<StoreError>,
{
    let until = std::time::Instant::now() + ANSWER_SPIN;
    loop {
        match answer.try_recv() {
            Ok(result) => return Some(result),
            Err(oneshot::error::TryRecvError::Closed) => return Some(Err(StoreError::Lost.into())),
            Err(oneshot::error::TryRecvError::Empty) => {}
        }
        if std::time::Instant::now() >= until {
            return None;
        }
        std::thread::yield_now();
        tokio::task::yield_now().await;
    }
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_string())
}

/// The writer thread: batches what is queued into one transaction, a savepoint per write
/// when there are several.
fn write_loop(
    mut conn: Link,
    mut queue: mpsc::Receiver<Queued>,
    mut rewinder: Option<Rewinder>,
    counts: &Counts,
    node: &str,
) {
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    let mut spin = false;
    while let Some(first) = next_write(&mut queue, spin) {
        spin = first.watched;
        batch.push(first.job);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(queued) => {
                    spin |= queued.watched;
                    batch.push(queued.job);
                }
                Err(_) => break,
            }
        }
        counts
            .writes
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        counts.commits.fetch_add(1, Ordering::Relaxed);
        commit_batch(&mut conn, &mut batch, node);
        if let (Some(rewinder), Link::Sqlite(conn)) = (&mut rewinder, &conn) {
            rewinder.after_batch(conn);
        }
    }
    tracing::debug!("the store's writer stopped: every handle was dropped");
}

/// The next write: with `spin`, looked for without sleeping for [`WRITER_SPIN`] (yielding the
/// core to any thread that wants it) first; then waited for. `None` once every sender is gone.
fn next_write(queue: &mut mpsc::Receiver<Queued>, spin: bool) -> Option<Queued> {
    if spin {
        let spin_until = std::time::Instant::now() + WRITER_SPIN;
        loop {
            match queue.try_recv() {
                Ok(queued) => return Some(queued),
                Err(mpsc::error::TryRecvError::Disconnected) => return None,
                Err(mpsc::error::TryRecvError::Empty) => {}
            }
            if std::time::Instant::now() >= spin_until {
                break;
            }
            std::thread::yield_now();
        }
    }
    queue.blocking_recv()
}

/// Runs a batch of writes in one transaction (each from the connection's statement cache: a
/// savepoint per write is parsed once, not at every write). On PostgreSQL the statements
/// between two writes (one's release, the next one's savepoint) go in one round trip.
fn commit_batch(link: &mut Link, batch: &mut Vec<Job>, node: &str) {
    let alone = batch.len() == 1;
    let begin = link.conn().dialect().begin_write();
    // A write alone needs no savepoint: the transaction is its own (and SQLite copies no page
    // into a savepoint journal).
    let opening: &[&str] = if alone {
        &[begin]
    } else {
        &[begin, "SAVEPOINT write"]
    };
    if let Err(err) = link.run_all(opening) {
        // A PostgreSQL server that went away (a restart): connect again and try once more.
        link.heal();
        if link.run_all(opening).is_err() {
            let why = err.to_string();
            tracing::error!(error = %why, "cannot begin a write transaction");
            // Nothing ran; each caller learns its write was lost.
            batch.clear();
            return;
        }
    }
    let conn = &*link;
    let tx = Tx::of(Rd::of(conn, node));
    if alone && let Some(job) = batch.pop() {
        let ran = job(&tx);
        let end = if ran.keep {
            conn.run("COMMIT")
        } else {
            conn.run("ROLLBACK")
        };
        let failed = end.err().map(|err| err.to_string());
        if let Some(why) = &failed {
            tracing::error!(error = %why, "a write was not committed");
            let _ = conn.run("ROLLBACK");
        }
        (ran.answer)(failed.as_deref());
        return;
    }
    let mut answers = Vec::with_capacity(batch.len());
    let mut broken: Option<String> = None;
    // What the last write owes before the next statement: its savepoint's end.
    let mut owed: Vec<&str> = Vec::with_capacity(4);
    for (i, job) in batch.drain(..).enumerate() {
        if broken.is_some() {
            // The transaction is beyond saving; the job is dropped and its caller told so.
            drop(job);
            continue;
        }
        if i > 0 {
            owed.push("SAVEPOINT write");
            if let Err(err) = conn.run_all(&owed) {
                broken = Some(err.to_string());
                drop(job);
                continue;
            }
        }
        owed.clear();
        let prelude = tx.feed_prelude.get();
        let ran = job(&tx);
        if ran.keep {
            owed.push("RELEASE write");
        } else {
            owed.extend(["ROLLBACK TO write", "RELEASE write"]);
            // A notice sent inside the savepoint goes with it.
            tx.feed_prelude_ran(prelude);
        }
        answers.push(ran.answer);
    }
    let failed = match broken {
        Some(why) => Some(why),
        None => {
            owed.push("COMMIT");
            conn.run_all(&owed).err().map(|err| err.to_string())
        }
    };
    if let Some(why) = &failed {
        tracing::error!(error = %why, writes = answers.len(), "a write batch was not committed");
        let _ = conn.run("ROLLBACK");
    }
    for answer in answers {
        answer(failed.as_deref());
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Store, StoreError};
    use crate::sql::{Conn, Queries, params};

    /// A store at `path` with the table `create` makes.
    fn store_with(path: &std::path::Path, create: &'static str) -> anyhow::Result<Store> {
        let store = Store::open(path)?;
        store.write_blocking(move |tx| {
            tx.sqlite().expect("a SQLite store").execute_batch(create)?;
            Ok::<_, StoreError>(())
        })?;
        Ok(store)
    }

    /// A store with a table of blobs; [`add_blob`] adds one of two pages and more.
    fn store_with_blobs(path: &std::path::Path) -> anyhow::Result<Store> {
        store_with(path, "CREATE TABLE blobs (b BLOB NOT NULL)")
    }

    fn add_blob(store: &Store) -> Result<(), StoreError> {
        store.write_blocking(|tx| {
            tx.execute("INSERT INTO blobs (b) VALUES (zeroblob(8192))", params![])?;
            Ok::<_, StoreError>(())
        })
    }

    #[test]
    fn a_steady_stream_of_writes_does_not_grow_the_wal_without_bound() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("canopy.db");
        let store = store_with_blobs(&path)?;
        let wal = dir.path().join("canopy.db-wal");
        let mut largest = 0;
        // 3,000 writes of two pages and more each: a WAL never rewound would pass 24 MB.
        for _ in 0..3_000 {
            add_blob(&store)?;
            largest = largest.max(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0));
        }
        assert!(
            largest < 12 * 1024 * 1024,
            "the WAL grew to {largest} bytes while writes kept coming"
        );
        Ok(())
    }

    #[test]
    fn a_cached_statement_with_a_bound_limit_is_not_compiled_again_at_each_use()
    -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = store_with_table(dir.path())?;
        store.write_blocking(|tx| {
            tx.execute(
                "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 100)
                 INSERT INTO t (n) SELECT n FROM c",
                params![],
            )?;
            Ok::<_, StoreError>(())
        })?;
        let reprepared = store.read_blocking(|rd| {
            let sql = "SELECT n FROM t WHERE n > ?1 ORDER BY n LIMIT ?2";
            for limit in [3_i64, 50, 3, 7] {
                let rows = rd
                    .query_map(sql, params![0_i64, limit], |r| r.get::<i64>(0))?
                    .len();
                assert_eq!(rows as i64, limit);
            }
            let statement = rd.sqlite().expect("a SQLite store").prepare_cached(sql)?;
            Ok::<_, StoreError>(statement.get_status(rusqlite::StatementStatus::RePrepare))
        })?;
        assert_eq!(
            reprepared, 0,
            "the statement was compiled again {reprepared} times"
        );
        Ok(())
    }

    fn store_with_table(dir: &std::path::Path) -> anyhow::Result<Store> {
        store_with(
            &dir.join("canopy.db"),
            "CREATE TABLE t (n INTEGER NOT NULL UNIQUE)",
        )
    }

    fn rows(store: &Store) -> anyhow::Result<Vec<i64>> {
        Ok(store.read_blocking(|rd| {
            let mut statement = rd
                .sqlite()
                .expect("a SQLite store")
                .prepare("SELECT n FROM t ORDER BY n")?;
            let rows = statement.query_map([], |r| r.get(0))?;
            Ok::<_, StoreError>(rows.collect::<Result<Vec<i64>, _>>()?)
        })?)
    }

    #[test]
    fn a_failed_write_alone_leaves_nothing_and_the_next_write_lands() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = store_with_table(dir.path())?;
        let failed = store.write_blocking(|tx| {
            tx.execute("INSERT INTO t (n) VALUES (1)", params![])?;
            // The unique constraint fails the second insert: the first must not stay.
            tx.execute("INSERT INTO t (n) VALUES (1)", params![])?;
            Ok::<_, StoreError>(())
        });
        assert!(failed.is_err(), "the duplicate insert fails the write");
        assert_eq!(rows(&store)?, Vec::<i64>::new());
        store.write_blocking(|tx| {
            tx.execute("INSERT INTO t (n) VALUES (2)", params![])?;
            Ok::<_, StoreError>(())
        })?;
        assert_eq!(rows(&store)?, vec![2]);
        Ok(())
    }

    #[test]
    fn writes_sent_together_commit_apart_from_one_that_fails() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = store_with_table(dir.path())?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()?;
        let results = runtime.block_on(async {
            let mut writes = Vec::new();
            for n in 0..200_i64 {
                let store = store.clone();
                writes.push(tokio::spawn(async move {
                    store
                        .write(move |tx| {
                            tx.execute("INSERT INTO t (n) VALUES (?1)", params![n])?;
                            if n == 100 {
                                // Fails after its insert ran: the insert must be undone.
                                tx.execute("INSERT INTO t (n) VALUES (?1)", params![n])?;
                            }
                            Ok::<_, StoreError>(())
                        })
                        .await
                }));
            }
            let mut results = Vec::new();
            for write in writes {
                results.push(write.await);
            }
            results
        });
        for (n, result) in results.into_iter().enumerate() {
            assert_eq!(result?.is_ok(), n != 100, "write {n}");
        }
        let expected: Vec<i64> = (0..200).filter(|n| *n != 100).collect();
        assert_eq!(rows(&store)?, expected);
        Ok(())
    }

    #[test]
    fn a_reader_holding_old_frames_delays_the_rewind_and_never_fails_a_write() -> anyhow::Result<()>
    {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("canopy.db");
        let store = store_with_blobs(&path)?;
        // A reader of its own holding a snapshot: no rewind can finish while it reads.
        let reader = rusqlite::Connection::open(&path)?;
        reader.execute_batch("BEGIN")?;
        let _: i64 = reader.query_row("SELECT count(*) FROM blobs", [], |r| r.get(0))?;
        for _ in 0..1_000 {
            add_blob(&store)?;
        }
        let wal = dir.path().join("canopy.db-wal");
        let held = std::fs::metadata(&wal)?.len();
        assert!(
            held > 4 * 1024 * 1024,
            "the reader kept the WAL ({held} bytes)"
        );
        reader.execute_batch("COMMIT")?;
        drop(reader);
        // Once it is gone, the writer's next tries rewind the log, and the file is cut back
        // to the length a rewound log keeps.
        let kept = super::WAL_KEPT_BYTES;
        let mut smallest = held;
        for _ in 0..3_000 {
            add_blob(&store)?;
            smallest = smallest.min(std::fs::metadata(&wal)?.len());
            if smallest <= kept {
                break;
            }
        }
        assert!(
            smallest <= kept,
            "the WAL stayed at {smallest} bytes after the reader left (at most {kept} kept)"
        );
        Ok(())
    }

    /// A watched write whose caller gives up while it waits (a request dropped, a deadline)
    /// still commits, and stops counting as awaited: a count left behind would keep every
    /// later watched write from looking for its answer, and nothing would say so.
    #[test]
    fn a_watched_write_dropped_while_it_waits_commits_and_is_no_longer_awaited()
    -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = store_with_table(dir.path())?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()?;
        let (entered, inside) = std::sync::mpsc::channel();
        let (release, held) = std::sync::mpsc::channel::<()>();
        let writing = store.clone();
        let gave_up = runtime.block_on(async move {
            let write = writing.write_watched(move |tx| {
                let _ = entered.send(());
                // The writer holds this write until the caller has given up on it.
                let _ = held.recv_timeout(std::time::Duration::from_secs(10));
                tx.execute("INSERT INTO t (n) VALUES (1)", params![])?;
                Ok::<_, StoreError>(())
            });
            tokio::time::timeout(std::time::Duration::from_millis(20), write).await
        });
        assert!(
            gave_up.is_err(),
            "the write was answered while the writer held it"
        );
        inside.recv_timeout(std::time::Duration::from_secs(10))?;
        assert_eq!(
            store.awaited_writes(),
            0,
            "the dropped write still counts as awaited"
        );
        release.send(())?;
        // The next write comes after it: once it lands, the dropped one has too.
        store.write_blocking(|tx| {
            tx.execute("INSERT INTO t (n) VALUES (2)", params![])?;
            Ok::<_, StoreError>(())
        })?;
        assert_eq!(rows(&store)?, vec![1, 2]);
        // A watched write alone gets its answer.
        let answered = runtime.block_on(store.write_watched(|tx| {
            tx.execute("INSERT INTO t (n) VALUES (3)", params![])?;
            Ok::<_, StoreError>(7)
        }))?;
        assert_eq!(answered, 7);
        assert_eq!(store.awaited_writes(), 0);
        Ok(())
    }
}
