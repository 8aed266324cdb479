//! The SQLite backend's machinery: one writer thread that group-commits, and a small pool of
//! read connections. Nothing here blocks a tokio worker: callers await a oneshot answer.
//!
//! **Writes.** Every write is a closure sent over a bounded channel to the writer thread. The
//! writer takes whatever has queued up (up to [`MAX_BATCH`]) and runs it in one transaction,
//! each closure inside its own savepoint: a closure that fails is rolled back alone, the others
//! commit together. Every caller is answered only after `COMMIT` returns, so an acknowledged
//! write is durable; under load many small writes share one commit instead of paying one each.
//!
//! **Reads.** A read takes a permit for one of [`READERS`] connections and runs on tokio's
//! blocking pool. In WAL mode readers never wait for the writer and see every committed write.

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use rusqlite::{Connection, OpenFlags};
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::StoreError;

/// Read connections kept open.
pub const READERS: usize = 4;
/// Writes committed together at most.
pub const MAX_BATCH: usize = 512;
/// Writes that may wait for the writer; a caller beyond that waits to enqueue (backpressure).
const WRITE_QUEUE: usize = 4096;

/// Read access to the database, inside one read transaction or one write savepoint.
/// The store's modules add their queries to it; nothing outside `store/` sees the connection.
pub struct Rd<'a> {
    conn: &'a Connection,
}

impl<'a> Rd<'a> {
    pub(super) fn conn(&self) -> &'a Connection {
        self.conn
    }
}

/// Write access: everything [`Rd`] can do, plus the store's writes. All writes made through
/// one `Tx` are committed together or not at all.
pub struct Tx<'a> {
    rd: Rd<'a>,
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

pub(super) struct Db {
    /// Tells the checkpointer to stop when the store goes away.
    stop: Arc<std::sync::atomic::AtomicBool>,
    writes: mpsc::Sender<Job>,
    readers: Arc<Readers>,
    permits: Arc<Semaphore>,
}

/// The read connections not in use, and a wait for one to come back.
struct Readers {
    idle: Mutex<Vec<Connection>>,
    returned: Condvar,
}

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // In WAL mode NORMAL loses nothing when the daemon is killed; only a power loss can drop
    // the last commits.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.busy_timeout(Duration::from_secs(5))?;
    // A write's savepoint journal stays in memory instead of a temp file.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.set_prepared_statement_cache_capacity(256);
    Ok(())
}

/// How often the checkpointer copies the WAL back into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(50);

/// WAL frames past which the checkpointer rewinds the log. A passive checkpoint copies frames
/// back but never rewinds the file while writes keep coming (a flood of webhook deliveries grew
/// it to 780 MB); past this many frames (64 MiB of 4 KiB pages) it truncates the WAL once every
/// frame is copied, holding writers for that instant only.
const WAL_REWIND_FRAMES: i64 = if cfg!(test) { 256 } else { 16 * 1024 };

/// Checkpoints the WAL on its own thread and connection, so the writer never pays for a
/// checkpoint (and its fsync) inside a commit. Stops once `stop` is set.
fn checkpoint_loop(conn: Connection, stop: Arc<std::sync::atomic::AtomicBool>) {
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(CHECKPOINT_EVERY);
        match checkpoint(&conn, "PASSIVE") {
            Ok((log, copied)) if log > WAL_REWIND_FRAMES && copied == log => {
                if let Err(err) = checkpoint(&conn, "TRUNCATE") {
                    tracing::debug!(%err, "the WAL could not be rewound; the next checkpoint tries again");
                }
            }
            Ok(_) => {}
            Err(err) => {
                tracing::debug!(%err, "a WAL checkpoint did not run; the next one will");
            }
        }
    }
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
        migrate: impl FnOnce(&mut Connection) -> Result<()>,
    ) -> Result<Self> {
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
            readers.push(conn);
        }
        // The writer never checkpoints; the checkpointer does, off its path.
        writer.pragma_update(None, "wal_autocheckpoint", 0)?;
        let checkpointer = Connection::open(path)
            .with_context(|| format!("cannot open database {}", path.display()))?;
        configure(&checkpointer)?;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (writes, queue) = mpsc::channel(WRITE_QUEUE);
        std::thread::Builder::new()
            .name("canopy-store-writer".into())
            .spawn(move || write_loop(writer, queue))
            .context("cannot start the store's writer thread")?;
        let stopping = stop.clone();
        std::thread::Builder::new()
            .name("canopy-store-checkpoint".into())
            .spawn(move || checkpoint_loop(checkpointer, stopping))
            .context("cannot start the store's checkpoint thread")?;
        Ok(Self {
            stop,
            writes,
            readers: Arc::new(Readers {
                idle: Mutex::new(readers),
                returned: Condvar::new(),
            }),
            permits: Arc::new(Semaphore::new(READERS)),
        })
    }

    pub(super) async fn write<T, E>(
        &self,
        work: impl FnOnce(&Tx<'_>) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        let (job, answer) = write_job(work);
        if self.writes.send(job).await.is_err() {
            return Err(StoreError::Closed.into());
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
        if self.writes.blocking_send(job).is_err() {
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
        let ran = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let conn = pop(&readers)?;
            let result = run_read(&conn, work);
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
        let conn = pop(&self.readers)?;
        let result = run_read(&conn, work);
        push(&self.readers, conn);
        result
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Takes an idle read connection, waiting for one while all are in use. Async readers hold
/// a permit first, so they only wait here behind blocking readers (tests, the artifact cache).
fn pop(readers: &Readers) -> Result<Connection, StoreError> {
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

fn push(readers: &Readers, conn: Connection) {
    readers
        .idle
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(conn);
    readers.returned.notify_one();
}

/// Runs `work` in one read transaction, so everything it reads is one consistent snapshot.
fn run_read<T, E>(conn: &Connection, work: impl FnOnce(&Rd<'_>) -> Result<T, E>) -> Result<T, E>
where
    E: From<StoreError>,
{
    conn.execute_batch("BEGIN DEFERRED")
        .map_err(|err| E::from(err.into()))?;
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| work(&Rd { conn })));
    // A read transaction has nothing to keep; ending it can only fail if it already ended.
    let _ = conn.execute_batch("COMMIT");
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

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_string())
}

/// The writer thread: batches what is queued into one transaction, a savepoint per write.
fn write_loop(conn: Connection, mut queue: mpsc::Receiver<Job>) {
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = queue.blocking_recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        commit_batch(&conn, &mut batch);
    }
    tracing::debug!("the store's writer stopped: every handle was dropped");
}

/// Runs one statement from the statement cache (a savepoint per write is parsed once, not at
/// every write).
fn run_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

fn commit_batch(conn: &Connection, batch: &mut Vec<Job>) {
    if let Err(err) = conn.execute_batch("BEGIN IMMEDIATE") {
        let why = err.to_string();
        tracing::error!(error = %why, "cannot begin a write transaction");
        // Nothing ran; each caller learns its write was lost.
        batch.clear();
        return;
    }
    let tx = Tx { rd: Rd { conn } };
    let mut answers = Vec::with_capacity(batch.len());
    let mut broken: Option<String> = None;
    for job in batch.drain(..) {
        if broken.is_some() {
            // The transaction is beyond saving; the job is dropped and its caller told so.
            drop(job);
            continue;
        }
        if let Err(err) = run_cached(conn, "SAVEPOINT write") {
            broken = Some(err.to_string());
            drop(job);
            continue;
        }
        let ran = job(&tx);
        let end = if ran.keep {
            run_cached(conn, "RELEASE write")
        } else {
            run_cached(conn, "ROLLBACK TO write").and_then(|()| run_cached(conn, "RELEASE write"))
        };
        if let Err(err) = end {
            broken = Some(err.to_string());
        }
        answers.push(ran.answer);
    }
    let failed = match broken {
        Some(why) => Some(why),
        None => conn
            .execute_batch("COMMIT")
            .err()
            .map(|err| err.to_string()),
    };
    if let Some(why) = &failed {
        tracing::error!(error = %why, writes = answers.len(), "a write batch was not committed");
        let _ = conn.execute_batch("ROLLBACK");
    }
    for answer in answers {
        answer(failed.as_deref());
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Store, StoreError};

    #[test]
    fn a_steady_stream_of_writes_does_not_grow_the_wal_without_bound() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("canopy.db");
        let store = Store::open(&path)?;
        store.write_blocking(|tx| {
            tx.conn()
                .execute_batch("CREATE TABLE blobs (b BLOB NOT NULL)")?;
            Ok::<_, StoreError>(())
        })?;
        let wal = dir.path().join("canopy.db-wal");
        let mut largest = 0;
        // 3,000 writes of two pages and more each: a WAL never rewound would pass 24 MB.
        for _ in 0..3_000 {
            store.write_blocking(|tx| {
                tx.conn()
                    .execute("INSERT INTO blobs (b) VALUES (zeroblob(8192))", [])?;
                Ok::<_, StoreError>(())
            })?;
            largest = largest.max(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0));
        }
        assert!(
            largest < 12 * 1024 * 1024,
            "the WAL grew to {largest} bytes while writes kept coming"
        );
        Ok(())
    }
}
