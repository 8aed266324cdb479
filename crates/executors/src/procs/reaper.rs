//! The daemon as a child subreaper, and reaping the orphans it adopts.
//!
//! With `PR_SET_CHILD_SUBREAPER`, a process whose parent exits is re-parented to the daemon
//! instead of to init, so everything a call starts stays a descendant of the daemon. When such
//! an adopted orphan exits, only the daemon can reap it: nothing else would, and it would stay a
//! zombie. But the daemon also has children of its own that tokio (or std) waits for by pid --
//! process-group leaders spawned for plugins, `git status`, `tmux` -- and reaping one of those
//! first would steal its exit status (`wait` would fail with ECHILD).
//!
//! The rule: [`reap_orphans`] reaps a child only if it is a zombie, is **not** in the daemon's
//! own process group, is **not** in the registry of spawned leaders, and started before every
//! spawn still in flight:
//!
//! - every direct child the daemon spawns without a process group of its own (`git`, `tmux`,
//!   `sh` for markers, bench probes) inherits the daemon's group, so it is never touched;
//! - every child spawned into a group of its own goes through [`spawn`], which notes the clock
//!   tick it began at before the fork and records the pid as soon as the spawn returns; the pid
//!   leaves the registry only after its waiter has reaped it ([`forget`]);
//! - [`reap_orphans`] / [`with_scan`] take the earliest tick of the spawns in flight before they
//!   scan, and leave alone every zombie that started at or after it: a child whose spawn has
//!   not returned yet, or began after the scan did, is never taken for an orphan. The lock is
//!   held for moments only, so spawns run in parallel with each other and with the scans.
//!
//! What is left are processes that were re-parented to the daemon: orphans of plugin processes.
//! A zombie found by the scan cannot be reaped by anyone else in between (no other waiter knows
//! its pid), so the `waitpid` is about the process scanned.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::table::{self, ProcStat};

/// The group leaders the daemon spawned and still waits for, and the spawns in flight.
#[derive(Default)]
struct Registry {
    /// Pids of spawned leaders not reaped by their waiters yet.
    spawned: BTreeSet<i32>,
    /// Spawns that have not returned, by the clock tick they began at (how many per tick).
    in_flight: BTreeMap<u64, usize>,
}

impl Registry {
    /// The earliest tick a child of a spawn in flight can have started at, or `now` when none
    /// is in flight.
    fn floor(&self, now: u64) -> u64 {
        self.in_flight
            .keys()
            .next()
            .map_or(now, |&first| first.min(now))
    }
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    spawned: BTreeSet::new(),
    in_flight: BTreeMap::new(),
});

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One spawn in flight: noted when it begins, cleared when it returns (or unwinds).
struct InFlight(u64);

impl InFlight {
    fn begin() -> Self {
        let tick = super::boot_ticks();
        *registry().in_flight.entry(tick).or_default() += 1;
        Self(tick)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut registry = registry();
        if let Some(count) = registry.in_flight.get_mut(&self.0) {
            *count -= 1;
            if *count == 0 {
                registry.in_flight.remove(&self.0);
            }
        }
    }
}

/// Set once this process is a child subreaper.
static SUBREAPER: AtomicBool = AtomicBool::new(false);

/// Makes this process a child subreaper (Linux): orphaned descendants are re-parented to it.
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl(2) with PR_SET_CHILD_SUBREAPER takes an integer flag; no memory is passed.
    let done = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if done == 0 {
        SUBREAPER.store(true, Ordering::Relaxed);
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The processes a sweep and the reaper need to look at. As a subreaper, every process a call
/// started stays a descendant of the daemon (an orphan is re-parented to the nearest subreaper
/// above it), so walking down from the daemon finds them all without reading every process on
/// the machine. Otherwise, every process.
///
/// The walk starts at the daemon's threads that can have such children, not at all of them
/// (a children list is per thread, and reading one per thread of a busy daemon was most of a
/// scan): each thread that started a call's process ([`note_spawning_thread`]), and the main
/// thread, which Linux gives the orphans it re-parents to a subreaper (the first live thread of
/// its group) and the children of a thread that exits.
///
/// It leaves out the group leaders still in the registry -- calls still running -- and their
/// subtrees: a sweep is for a call whose leader was reaped (what it left was re-parented to
/// the daemon, under the main thread), and nothing of one call can be below another call's
/// leader, since an orphan goes up to the daemon, never across. The reaper leaves registered
/// leaders alone anyway. So a sweep's cost does not grow with the processes of the calls still
/// running (an agent's tree of tools, times the calls at once).
fn family() -> Vec<ProcStat> {
    if !(SUBREAPER.load(Ordering::Relaxed) && table::children_listed()) {
        return table::scan();
    }
    let me = i32::try_from(std::process::id()).unwrap_or_default();
    let mut parents = spawning_threads().clone();
    parents.insert(me);
    let running = registry().spawned.clone();
    let mut first = table::children_of_tasks(me, &parents);
    first.retain(|pid| !running.contains(pid));
    table::walk_down(first)
}

/// Whether a finished call certainly left nothing behind, told without a sweep: its process
/// group `group` is empty, and no process hangs below the daemon, outside the calls still
/// running, that started at or after `since` (the call's start, in clock ticks after boot).
/// False whenever that cannot be known (no subreaper, no children lists): then it is swept.
///
/// Why that is enough: take any live process of the call. Walk up its parents while they are
/// the call's and alive; the top one, `T`, is not in the group (the group is empty), and its
/// parent is dead, so `T` was re-parented to the daemon (the nearest subreaper above it: a
/// subreaper of the call's own would have to be alive and above it, and it is not) when that
/// parent died, and stays the daemon's child until it dies. Linux gives a subreaper's orphans
/// to its first live thread, the main thread, whose list is read after the group was found
/// empty: `T` is on it then, with a start time at or after `since`. (The other threads' lists
/// hold the calls' leaders, which are never orphans, and a leader just spawned by another call
/// may not be registered yet: they are not read.) A process that `T` starts or that dies
/// meanwhile moves the lists while they are read: the check is made twice in a row, as the
/// sweep's two clean scans are, and one that finds anything leaves the call to the sweep.
pub fn nothing_left(group: Option<i32>, since: u64) -> bool {
    if !(SUBREAPER.load(Ordering::Relaxed) && table::children_listed()) {
        return false;
    }
    let me = i32::try_from(std::process::id()).unwrap_or_default();
    for _ in 0..2 {
        if group.is_some_and(table::group_exists) {
            return false;
        }
        // Only the main thread's list: the other threads' children are calls' leaders.
        for pid in table::children_of_tasks(me, &BTreeSet::from([me])) {
            if registry().spawned.contains(&pid) {
                // A call still running (a leader started from the main thread).
                continue;
            }
            match table::stat(pid) {
                // Gone meanwhile, or an orphan of an older call: not this call's.
                None => {}
                Some(process) if process.start < since => {}
                Some(_) => return false,
            }
        }
    }
    true
}

/// The daemon's threads that started processes of calls.
fn spawning_threads() -> MutexGuard<'static, BTreeSet<i32>> {
    static THREADS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());
    THREADS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Notes that the calling thread starts processes of calls: their children lists are where a
/// scan finds them.
pub fn note_spawning_thread() {
    // SAFETY: gettid(2) takes no arguments and cannot fail.
    let tid = unsafe { libc::gettid() };
    spawning_threads().insert(tid);
}

/// Spawns `command` (which must put the child in a process group of its own) and registers the
/// child's pid before the spawn counts as over, so the reaper never reaps it.
pub async fn spawn(command: tokio::process::Command) -> std::io::Result<tokio::process::Child> {
    let in_flight = InFlight::begin();
    let child = super::spawner::spawn(command).await?;
    if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
        registry().spawned.insert(pid);
    }
    drop(in_flight);
    Ok(child)
}

/// The child `pid` was reaped by its waiter (or handed to tokio's orphan queue): the reaper may
/// treat a zombie with that pid as an orphan again.
pub fn forget(pid: i32) {
    registry().spawned.remove(&pid);
}

/// Reaps the adopted orphans that have exited.
pub fn reap_orphans() {
    with_scan(|_| ());
}

/// Scans the daemon's descendants (every process when it is no subreaper), hands the scan to
/// `inspect`, then reaps the adopted orphans that were zombies in it. One scan serves a caller
/// and the reaper.
pub fn with_scan<T>(inspect: impl FnOnce(&[ProcStat]) -> T) -> T {
    // Taken before the scan: a zombie that started at or after it may be the child of a spawn
    // that has not registered it yet.
    let floor = registry().floor(super::boot_ticks());
    let processes = family();
    let inspected = inspect(&processes);
    let me = i32::try_from(std::process::id()).unwrap_or_default();
    // SAFETY: getpgrp(2) cannot fail and touches no memory.
    let own_group = unsafe { libc::getpgrp() };
    let registry = registry();
    for process in &processes {
        if process.ppid != me
            || !process.zombie()
            || process.pgrp == own_group
            || process.start >= floor
            || registry.spawned.contains(&process.pid)
        {
            continue;
        }
        let mut status = 0;
        // SAFETY: waitpid(2) on one pid with WNOHANG; `status` is a valid out-pointer.
        unsafe {
            libc::waitpid(process.pid, &mut status, libc::WNOHANG);
        }
    }
    inspected
}

/// Least time between two reaping scans.
const MIN_GAP: Duration = Duration::from_millis(100);
/// A scan at least this often, whatever the signals say.
const PERIOD: Duration = Duration::from_secs(5);

/// Reaps adopted orphans for the daemon's lifetime: after SIGCHLD (at most every [`MIN_GAP`])
/// and every [`PERIOD`].
pub async fn run() {
    let mut sigchld = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()) {
        Ok(signal) => Some(signal),
        Err(err) => {
            tracing::warn!(%err, "cannot listen for SIGCHLD; reaping orphans every 5 s only");
            None
        }
    };
    loop {
        let signalled = async {
            match sigchld.as_mut() {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        let _ = tokio::time::timeout(PERIOD, signalled).await;
        reap_orphans();
        tokio::time::sleep(MIN_GAP).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt as _;
    use std::time::Instant;

    /// Starts `true` in a group of its own, as a call's leader is, without registering it, and
    /// waits until it is a zombie: to the reaper it looks like an adopted orphan.
    fn exited_unregistered_child() -> std::process::Child {
        // Where a scan looks for the daemon's children when it is a subreaper.
        note_spawning_thread();
        let child = std::process::Command::new("true")
            .process_group(0)
            .spawn()
            .expect("spawn true");
        let pid = i32::try_from(child.id()).expect("pid");
        let deadline = Instant::now() + Duration::from_secs(10);
        while table::stat(pid).is_none_or(|p| !p.zombie()) {
            assert!(Instant::now() < deadline, "`true` did not exit");
            std::thread::sleep(Duration::from_millis(1));
        }
        child
    }

    #[test]
    fn a_child_of_a_spawn_in_flight_is_never_reaped_as_an_orphan() {
        // The spawn has begun but not registered its child: the child's exit status is its
        // waiter's, however many scans run meanwhile.
        let in_flight = InFlight::begin();
        let mut child = exited_unregistered_child();
        for _ in 0..3 {
            reap_orphans();
        }
        let status = child.try_wait().expect("the exit status is still there");
        assert!(status.is_some_and(|s| s.success()), "{status:?}");
        drop(in_flight);

        // Once no spawn that began before it is in flight, such a zombie is an orphan.
        let mut child = exited_unregistered_child();
        let pid = i32::try_from(child.id()).expect("pid");
        let deadline = Instant::now() + Duration::from_secs(10);
        while table::stat(pid).is_some_and(|p| p.zombie()) {
            // Other tests' spawns in flight hold it back for moments only.
            assert!(
                Instant::now() < deadline,
                "the orphan zombie was never reaped"
            );
            reap_orphans();
            std::thread::sleep(Duration::from_millis(5));
        }
        // The reaper took its exit status.
        assert!(
            child.try_wait().is_err(),
            "the orphan was reaped by its waiter"
        );
    }
}
