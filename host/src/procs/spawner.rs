//! Starting the user's processes with the user's umask, without a fork and without a shell.
//!
//! The daemon runs with umask 077 (everything it writes in the data dir is private), but what a
//! command creates in the user's workdir should get the umask the user started the daemon with.
//! The umask lives in a thread's filesystem context, which the threads of a process share; a
//! thread that calls `unshare(CLONE_FS)` gets a context of its own. So one thread, the spawner,
//! takes its own context and the user's umask, and every user process is started from it with
//! `posix_spawn` (cheap: no copy of the daemon's large address space, as a `fork` would make),
//! inheriting that umask. The other threads keep 077.
//!
//! Where the spawner cannot run (`unshare` refused, say by a seccomp filter), [`available`] is
//! false and [`crate::datadir::user_command`] sets the umask with a `/bin/sh` wrapper instead.

use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

/// A process to start, the runtime that will own its handle, and where the answer goes.
struct Job {
    command: tokio::process::Command,
    runtime: tokio::runtime::Handle,
    reply: mpsc::SyncSender<std::io::Result<tokio::process::Child>>,
}

/// The spawner's queue, once it runs with the user's umask (`None`: it could not).
fn spawner() -> Option<&'static Mutex<mpsc::Sender<Job>>> {
    static SPAWNER: OnceLock<Option<Mutex<mpsc::Sender<Job>>>> = OnceLock::new();
    SPAWNER.get_or_init(start).as_ref()
}

/// Starts the spawner thread; `None` when there is no user umask to set or it cannot be set.
fn start() -> Option<Mutex<mpsc::Sender<Job>>> {
    let mask = crate::datadir::user_umask()?;
    let (jobs, queue) = mpsc::channel::<Job>();
    let (ready, started) = mpsc::sync_channel::<std::io::Result<()>>(1);
    let thread = std::thread::Builder::new()
        .name("canopy-spawner".to_string())
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
            for mut job in queue {
                let _entered = job.runtime.enter();
                let _ = job.reply.send(job.command.spawn());
            }
        });
    if let Err(err) = thread {
        tracing::warn!(
            "cannot start the process spawner ({err}); user processes get their umask through /bin/sh"
        );
        return None;
    }
    match started.recv() {
        Ok(Ok(())) => Some(Mutex::new(jobs)),
        Ok(Err(err)) => {
            tracing::warn!(
                "the process spawner cannot take a umask of its own ({err}); user processes get their umask through /bin/sh"
            );
            None
        }
        Err(_) => None,
    }
}

/// True when user processes are started by the spawner, with the user's umask: a command for
/// one needs no wrapper to set it.
pub fn available() -> bool {
    spawner().is_some()
}

/// Starts `command` with the user's umask when the daemon runs with a umask of its own (from
/// the spawner thread), else as it is. Must be called within a tokio runtime, which owns the
/// child.
pub fn spawn(mut command: tokio::process::Command) -> std::io::Result<tokio::process::Child> {
    let (Some(spawner), Ok(runtime)) = (spawner(), tokio::runtime::Handle::try_current()) else {
        super::reaper::note_spawning_thread();
        return command.spawn();
    };
    let (reply, answer) = mpsc::sync_channel(1);
    let sent = spawner
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .send(Job {
            command,
            runtime,
            reply,
        });
    if let Err(mpsc::SendError(job)) = sent {
        // The spawner is gone (it cannot be, short of a panic in it): start it here.
        command = job.command;
        super::reaper::note_spawning_thread();
        return command.spawn();
    }
    // The wait is the spawn itself (posix_spawn returns once the child has exec'd), as long as
    // it would have blocked this thread anyway.
    answer.recv().unwrap_or_else(|_| {
        Err(std::io::Error::other(
            "the process spawner stopped before it answered",
        ))
    })
}
