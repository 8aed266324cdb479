//! Starting the user's processes with the user's umask, without a fork and without a shell.
//!
//! The daemon runs with umask 077 (everything it writes in the data dir is private), but what a
//! command creates in the user's workdir should get the umask the user started the daemon with.
//! The umask lives in a thread's filesystem context, which the threads of a process share; a
//! thread that calls `unshare(CLONE_FS)` gets a context of its own. So a few threads, the
//! spawners, each take their own context and the user's umask, and every user process is
//! started from one of them with `posix_spawn` (cheap: no copy of the daemon's large address
//! space, as a `fork` would make), inheriting that umask. The other threads keep 077.
//!
//! Where no spawner can run (`unshare` refused, say by a seccomp filter), [`available`] is
//! false and [`super::umask::user_command`] sets the umask with a `/bin/sh` wrapper instead.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// A process to start, the runtime that will own its handle, and where the answer goes.
struct Job {
    command: tokio::process::Command,
    runtime: tokio::runtime::Handle,
    reply: tokio::sync::oneshot::Sender<std::io::Result<tokio::process::Child>>,
}

/// Spawner threads: a spawn holds its thread until the child has exec'd (`posix_spawn` uses
/// `CLONE_VFORK`), so one thread would be a queue every call's process waits in.
fn spawner_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 4))
}

/// The spawners' queue, once they run with the user's umask (`None`: they could not).
fn spawner() -> Option<&'static Mutex<mpsc::Sender<Job>>> {
    static SPAWNER: OnceLock<Option<Mutex<mpsc::Sender<Job>>>> = OnceLock::new();
    SPAWNER.get_or_init(start).as_ref()
}

/// Starts the spawner threads; `None` when there is no user umask to set or none of them can
/// set it.
fn start() -> Option<Mutex<mpsc::Sender<Job>>> {
    let mask = super::umask::user_umask()?;
    let (jobs, queue) = mpsc::channel::<Job>();
    let queue = Arc::new(Mutex::new(queue));
    let mut running = 0;
    for index in 0..spawner_threads() {
        let (ready, started) = mpsc::sync_channel::<std::io::Result<()>>(1);
        let queue = Arc::clone(&queue);
        let thread = std::thread::Builder::new()
            .name(format!("canopy-spawn-{index}"))
            .spawn(move || {
                // SAFETY: unshare(CLONE_FS) gives this thread its own cwd, root and umask; it
                // touches no memory, and the other threads keep theirs.
                if unsafe { libc::unshare(libc::CLONE_FS) } != 0 {
                    let _ = ready.send(Err(std::io::Error::last_os_error()));
                    return;
                }
                // SAFETY: umask(2) cannot fail; after the unshare it sets this thread's mask only.
                unsafe { libc::umask(mask) };
                super::reaper::note_spawning_thread();
                let _ = ready.send(Ok(()));
                loop {
                    // The lock is held while waiting: the next job goes to whichever thread
                    // is free, and the others wait their turn for the queue.
                    let next = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
                    let Ok(mut job) = next else { return };
                    let _entered = job.runtime.enter();
                    let _ = job.reply.send(job.command.spawn());
                }
            });
        if let Err(err) = thread {
            tracing::warn!("cannot start a process spawner thread ({err})");
            continue;
        }
        match started.recv() {
            Ok(Ok(())) => running += 1,
            Ok(Err(err)) => {
                tracing::warn!("a process spawner thread cannot take a umask of its own ({err})");
            }
            Err(_) => {}
        }
    }
    if running == 0 {
        tracing::warn!("no process spawner runs; user processes get their umask through /bin/sh");
        return None;
    }
    Some(Mutex::new(jobs))
}

/// True when user processes are started by the spawner, with the user's umask: a command for
/// one needs no wrapper to set it.
pub fn available() -> bool {
    spawner().is_some()
}

/// Starts `command` with the user's umask when the daemon runs with a umask of its own (from
/// a spawner thread), else as it is. Must be called within a tokio runtime, which owns the
/// child. The caller's thread is free while a spawner starts the process (a spawn lasts until
/// the child has exec'd); dropped meanwhile, the child is dropped as it comes (and killed if
/// the command says `kill_on_drop`).
pub async fn spawn(mut command: tokio::process::Command) -> std::io::Result<tokio::process::Child> {
    let (Some(spawner), Ok(runtime)) = (spawner(), tokio::runtime::Handle::try_current()) else {
        super::reaper::note_spawning_thread();
        return command.spawn();
    };
    let (reply, answer) = tokio::sync::oneshot::channel();
    let sent = spawner
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .send(Job {
            command,
            runtime,
            reply,
        });
    if let Err(mpsc::SendError(job)) = sent {
        // The spawners are gone (they cannot be, short of a panic in them): start it here.
        command = job.command;
        super::reaper::note_spawning_thread();
        return command.spawn();
    }
    answer.await.unwrap_or_else(|_| {
        Err(std::io::Error::other(
            "the process spawner stopped before it answered",
        ))
    })
}
