//! Supervising the processes plugins run: what they inherit, and that nothing they start
//! outlives its call or the daemon.
//!
//! - **Environment** ([`env`]): a process gets `PATH`, `HOME`, `LANG`, `TZ`, `TERM` (those the
//!   daemon has), the variables named in `[process] pass_env`, the env the plugin sets on its
//!   command, and the host's own `CANOPY_*` variables -- never the rest of the daemon's
//!   environment.
//! - **Marker**: every process of one `run-command` call carries `CANOPY_CALL_ID=<id>` (set last,
//!   so a plugin cannot choose it), and children inherit it. A process that left the call's
//!   process group (`setsid`) is still found by it in `/proc/<pid>/environ`.
//! - **After every call** ([`CallProcesses::finish`]), also one that exited normally: when its
//!   group is empty and nothing started since the call began hangs below the daemon's main
//!   thread, twice in a row, the call left nothing ([`reaper::nothing_left`]: a few reads, the
//!   common case). Otherwise the call's group is killed, then every process started since the
//!   call began that is in that group or carries its marker, until two scans in a row find none
//!   (a process re-parented between two reads of one scan is in the next). A command marked
//!   `detach = true` (a top-level field of the hook or node config, one of the host's reserved
//!   keys, read by [`HostKeys::detach`](crate::plugins::HostKeys::detach)) is left running
//!   instead; its group is still killed if it runs into its deadline.
//! - **Subreaper** ([`reaper`]): the daemon adopts orphaned descendants and reaps them, without
//!   stealing the exit status of a child someone waits for.
//! - **Crashes** ([`ledger`]): each call's group is recorded in `procs/` in the data dir while it
//!   runs; the next start kills what a dead daemon left running (`[process]
//!   kill_orphans_on_start`, on by default).
//!
//! Limits: a process that both leaves the group and starts over with an empty environment
//! (`setsid env -i ...`) carries no marker; it is still adopted and reaped by the daemon when
//! it exits, but not killed when its call ends.

pub mod env;
pub mod ledger;
pub mod reaper;
pub mod spawner;
pub mod table;
pub mod umask;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, Result};

use ledger::{Entry, Ledger};
use serde::Deserialize;
use table::ProcStat;

/// How the daemon runs processes for plugins (`[process]`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ProcessConfig {
    /// Variables of the daemon's environment handed to every process, beyond the ones every
    /// process gets (`PATH`, `HOME`, `LANG`, `TZ`, `TERM`).
    pub pass_env: Vec<String>,
    /// At start, kill the processes that calls in flight when the daemon last stopped left
    /// running.
    pub kill_orphans_on_start: bool,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        Self {
            pass_env: Vec::new(),
            kill_orphans_on_start: true,
        }
    }
}

/// The variable that marks every process of one call.
pub const CALL_ID_VAR: &str = "CANOPY_CALL_ID";

/// What the daemon set up at start; a process run outside a daemon (unit tests) gets the
/// defaults: no extra variables, no ledger.
#[derive(Debug)]
struct Supervisor {
    pass_env: Vec<String>,
    ledger: Option<Ledger>,
    /// This daemon's data dir, handed to every process as `CANOPY_HOME`: a `canopy` command a
    /// hook, cron or node runs talks to this daemon, whatever data dir it was started with.
    data_root: Option<std::path::PathBuf>,
}

static SUPERVISOR: OnceLock<Supervisor> = OnceLock::new();

fn supervisor() -> &'static Supervisor {
    SUPERVISOR.get_or_init(|| Supervisor {
        pass_env: Vec::new(),
        ledger: None,
        data_root: None,
    })
}

/// Sets the daemon up to supervise processes: makes it a child subreaper, kills what calls of
/// a daemon that died on this data dir left running (unless configured otherwise), and starts
/// reaping adopted orphans. Call once, early in the daemon, inside its runtime.
pub async fn start(data_root: &Path, config: &ProcessConfig) -> Result<()> {
    if let Err(err) = reaper::become_subreaper() {
        tracing::warn!(%err, "cannot become a child subreaper; processes that leave their call's group are found by their marker only, and orphans are reaped by init");
    }
    let ledger = Ledger::open(&data_root.join("procs"))
        .with_context(|| format!("cannot create {}", data_root.join("procs").display()))?;
    let recovery = ledger::recover(&ledger, config.kill_orphans_on_start).await;
    if recovery.recorded > 0 {
        if config.kill_orphans_on_start {
            tracing::warn!(
                calls = recovery.recorded,
                killed = recovery.killed,
                left = recovery.left,
                "killed {} processes left running by {} calls in flight when the daemon last stopped",
                recovery.killed,
                recovery.recorded
            );
        } else {
            tracing::warn!(
                calls = recovery.recorded,
                left = recovery.left,
                "left {} processes of {} calls in flight when the daemon last stopped running (process.kill_orphans_on_start = false)",
                recovery.left,
                recovery.recorded
            );
        }
    }
    // What `pass_env` hands the processes is theirs, not the record's.
    for name in &config.pass_env {
        if let Ok(value) = std::env::var(name) {
            crate::secrets::register(&value);
        }
    }
    let supervisor = Supervisor {
        pass_env: config.pass_env.clone(),
        ledger: Some(ledger),
        data_root: Some(data_root.to_path_buf()),
    };
    if SUPERVISOR.set(supervisor).is_err() {
        tracing::warn!("process supervision was already set up; keeping the first setup");
    }
    tokio::spawn(reaper::run());
    start_sweeper();
    // The spawners start now, at the daemon's own priority: a thread inherits its creator's
    // nice value, and the webhook handlers' threads run lower, which their processes must not.
    spawner::available();
    Ok(())
}

/// The variables a process inherits from the daemon's environment, and `CANOPY_HOME` naming
/// the daemon's data dir (so a nested `canopy` call reaches this daemon).
pub fn inherited_env() -> Vec<(String, OsString)> {
    let supervisor = supervisor();
    let mut vars = env::inherited(&supervisor.pass_env, |name| std::env::var_os(name));
    if let Some(root) = &supervisor.data_root {
        vars.push((
            canopy_datadir::HOME_VAR.to_string(),
            root.as_os_str().to_owned(),
        ));
    }
    vars
}

/// Resolves a bare program name on the daemon's own `PATH` (not one a plugin passes).
pub fn which(program: &str) -> Option<std::path::PathBuf> {
    env::which(program, std::env::var_os("PATH").as_ref())
}

/// True for a call id as the host makes them (32 lowercase hex digits).
pub fn is_call_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The environment entry that marks a call's processes.
pub fn marker_entry(call: &str) -> String {
    format!("{CALL_ID_VAR}={call}")
}

/// How long a sweep keeps killing (a process may fork while it does).
const SWEEP_LIMIT: Duration = Duration::from_secs(2);

/// The processes of one `run-command` call: its marker, its group, its record in the ledger.
/// Dropped before [`finish`](Self::finish) -- the call was abandoned -- it kills the group at
/// once and sweeps the rest in the background.
#[derive(Debug)]
pub struct CallProcesses {
    id: String,
    detach: bool,
    leader: Option<ProcStat>,
    /// The leader's pid while it is registered with the reaper.
    registered: Option<i32>,
    /// Clock ticks after boot before which nothing of this call started.
    since: u64,
    /// Its file in the ledger (none when detached or outside a daemon).
    record: Option<ledger::Record>,
    /// Abandoned by its call and handed to a background sweep.
    handed_over: bool,
    finished: bool,
}

impl CallProcesses {
    /// A new call's tracking; recorded in the ledger (unless `detach`) before anything runs.
    pub fn new(detach: bool) -> std::io::Result<Self> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let mut call = Self {
            id,
            detach,
            leader: None,
            registered: None,
            since: boot_ticks(),
            record: None,
            handed_over: false,
            finished: false,
        };
        call.record()?;
        Ok(call)
    }

    /// The marker variable and its value, to set on the command (last).
    pub fn marker(&self) -> (&'static str, &str) {
        (CALL_ID_VAR, &self.id)
    }

    /// Writes the call's record: created at the first call, rewritten in place after.
    fn record(&mut self) -> std::io::Result<()> {
        let entry = Entry {
            call: self.id.clone(),
            boot_id: table::boot_id(),
            pgid: self.leader.map(|l| l.pid),
            start: self.leader.map(|l| l.start),
        };
        let written = match (&self.record, supervisor().ledger.as_ref()) {
            (Some(record), _) => record.update(&entry),
            (None, Some(ledger)) if !self.detach => ledger.create(&entry).map(|record| {
                self.record = Some(record);
            }),
            (None, _) => Ok(()),
        };
        written.map_err(|err| {
            std::io::Error::new(
                err.kind(),
                format!("cannot record the call's processes in the data dir: {err}"),
            )
        })
    }

    /// Spawns the call's group leader (`command` must make a process group of its own) and
    /// records its group.
    pub async fn spawn(
        &mut self,
        command: tokio::process::Command,
    ) -> std::io::Result<tokio::process::Child> {
        let child = reaper::spawn(command).await?;
        let pid = child.id().and_then(|id| i32::try_from(id).ok());
        self.registered = pid;
        // Its start is recorded as the call's: a tick at or before the leader's own (reading
        // the leader's from `/proc` cost as much as the rest of the record). The ledger's
        // recovery takes a leader that started at or after it and carries the call's marker.
        self.leader = pid.map(|pid| ProcStat {
            pid,
            state: 'R',
            ppid: 0,
            pgrp: pid,
            start: self.since,
            kernel: false,
        });
        self.record()?;
        Ok(child)
    }

    /// The leader was reaped by its waiter.
    pub fn leader_reaped(&mut self) {
        if let Some(pid) = self.registered.take() {
            reaper::forget(pid);
        }
    }

    /// Kills the call's process group now (the deadline).
    pub fn kill_group(&self) {
        if let Some(leader) = self.leader {
            table::kill_group(leader.pid);
        }
    }

    /// The call is over: unless detached, kills everything it left -- its group and every
    /// process carrying its marker -- reaps what the daemon adopted, and clears its record.
    /// Returns how many processes were killed.
    pub async fn finish(mut self) -> usize {
        self.finished = true;
        self.leader_reaped();
        if self.detach {
            return 0;
        }
        // The common case -- a command that left nothing -- is told in a few reads, here; a
        // call that may have left something is swept.
        if reaper::nothing_left(self.leader.map(|l| l.pid), self.since) {
            if let Some(record) = self.record.take() {
                record.remove();
            }
            return 0;
        }
        let (done, outcome) = tokio::sync::oneshot::channel();
        let pending = Pending {
            call: self.id.clone(),
            sweep: Sweep::of(&self),
            clean_scans: 0,
            deadline: tokio::time::Instant::now() + SWEEP_LIMIT,
            done,
        };
        if !submit(pending) {
            // No runtime to sweep on: the record stays, and the next start covers the rest.
            return 0;
        }
        let Ok((killed, clean)) = outcome.await else {
            return 0;
        };
        if clean && let Some(record) = self.record.take() {
            record.remove();
        }
        // Otherwise it stays in the ledger: the next start tries again.
        killed
    }
}

impl Drop for CallProcesses {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.kill_group();
        self.leader_reaped();
        if self.detach {
            return;
        }
        if self.handed_over {
            // The background sweep never ran (the runtime is shutting down): one pass now;
            // the record stays, and the next start covers the rest.
            Sweep::of(self).pass();
            return;
        }
        let finishing = Self {
            id: std::mem::take(&mut self.id),
            detach: false,
            leader: self.leader,
            registered: None,
            since: self.since,
            record: self.record.take(),
            handed_over: true,
            finished: false,
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(finishing.finish());
            }
            // Dropping it runs the one pass above.
            Err(_) => drop(finishing),
        }
    }
}

/// A finished call's sweep, waiting for its clean scans.
struct Pending {
    call: String,
    sweep: Sweep,
    /// Clean passes in a row: two are needed (a process re-parented or forked while the first
    /// one read the table is in the second).
    clean_scans: u32,
    deadline: tokio::time::Instant,
    /// (killed, ended clean) once the sweep is over.
    done: tokio::sync::oneshot::Sender<(usize, bool)>,
}

/// The queue of the task that sweeps finished calls.
static SWEEPER: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedSender<Pending>>> =
    std::sync::Mutex::new(None);

/// Starts the sweeping task on the calling runtime (the daemon's), unless one runs. Started
/// by the first call to finish instead, it would run wherever that call ran -- the plugin
/// threads, say -- and every finished call would wake a thread of that runtime.
fn start_sweeper() {
    let mut sweeper = SWEEPER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if sweeper.as_ref().is_some_and(|s| !s.is_closed()) {
        return;
    }
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(sweep_loop(receiver));
    *sweeper = Some(sender);
}

/// Hands a finished call to the one task that sweeps finished calls (started on the caller's
/// runtime when there is none, or when the runtime it ran on has gone). A scan of the process
/// table is the expensive part of a sweep (every process's `stat`, on a busy host hundreds of
/// files); calls that finish together share each scan, so many short calls (hooks, nodes) cost
/// a few scans, not two each.
/// False when there is no runtime to sweep on.
fn submit(pending: Pending) -> bool {
    let mut sweeper = SWEEPER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let pending = match sweeper.as_ref() {
        Some(sender) => match sender.send(pending) {
            Ok(()) => return true,
            Err(returned) => returned.0,
        },
        None => pending,
    };
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return false;
    };
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    runtime.spawn(sweep_loop(receiver));
    let sent = sender.send(pending).is_ok();
    *sweeper = Some(sender);
    sent
}

/// Sweeps every pending call over one scan of the process table at a time, until each has had
/// two clean passes in a row (or its time is up). The queue holds at most the calls that
/// finished meanwhile (calls are admitted by the executor host's limit).
async fn sweep_loop(mut queue: tokio::sync::mpsc::UnboundedReceiver<Pending>) {
    let mut active: Vec<Pending> = Vec::new();
    loop {
        if active.is_empty() {
            match queue.recv().await {
                Some(pending) => active.push(pending),
                None => return,
            }
        }
        while let Ok(pending) = queue.try_recv() {
            active.push(pending);
        }
        let found: Vec<Found> = reaper::with_scan(|processes| {
            // Each process's environment is read once per scan, whatever the number of calls
            // sweeping (under a burst, every call's processes were started since the others began).
            let mut markers = Markers::default();
            active
                .iter_mut()
                .map(|p| p.sweep.pass_over(processes, &mut markers))
                .collect()
        });
        let now = tokio::time::Instant::now();
        let mut waiting = false;
        let mut still = Vec::with_capacity(active.len());
        for (mut pending, found) in active.drain(..).zip(found) {
            if found.live == 0 && found.unsure == 0 {
                pending.clean_scans += 1;
                if pending.clean_scans >= 2 {
                    let _ = pending.done.send((pending.sweep.killed, true));
                    continue;
                }
            } else {
                pending.clean_scans = 0;
                if now >= pending.deadline {
                    tracing::warn!(call = %pending.call, live = found.live, "processes of a finished call still alive after {SWEEP_LIMIT:?} of killing");
                    let _ = pending.done.send((pending.sweep.killed, false));
                    continue;
                }
                waiting = true;
            }
            still.push(pending);
        }
        active = still;
        if waiting {
            // Give what was killed a moment to die, or an exec a moment to finish.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// The call markers processes carry, read from their environments once per scan.
#[derive(Default)]
struct Markers(BTreeMap<(i32, u64), Option<Vec<String>>>);

impl Markers {
    /// The call ids `process` carries (`None`: its environment read empty, see
    /// [`table::environ_values`]).
    fn of(&mut self, process: &ProcStat) -> Option<&Vec<String>> {
        self.0
            .entry((process.pid, process.start))
            .or_insert_with(|| table::environ_values(process.pid, CALL_ID_VAR))
            .as_ref()
    }
}

/// One call's kill-and-reap passes.
struct Sweep {
    /// The call's id, the value of its marker.
    id: String,
    group: Option<i32>,
    since: u64,
    killed: usize,
    /// Processes whose environment read empty, and how many passes in a row: one inside
    /// `execve` shows its environment a moment later; one still empty after
    /// [`EMPTY_PASSES`] really has none (and so no marker).
    empty: BTreeMap<(i32, u64), u32>,
}

/// Passes a process may show an empty environment before it counts as having none.
const EMPTY_PASSES: u32 = 5;

/// What one pass found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Found {
    /// Live processes of the call (all signalled).
    live: usize,
    /// Processes that may be the call's, to look at again.
    unsure: usize,
}

impl Sweep {
    fn of(call: &CallProcesses) -> Self {
        Self {
            id: call.id.clone(),
            group: call.leader.map(|l| l.pid),
            since: call.since,
            killed: 0,
            empty: BTreeMap::new(),
        }
    }

    /// Kills the group and every live process of the call; reaps adopted orphans that have
    /// exited.
    fn pass(&mut self) -> Found {
        reaper::with_scan(|processes| self.pass_over(processes, &mut Markers::default()))
    }

    /// [`Sweep::pass`] over a scan of the process table already made, reading environments
    /// through `markers`.
    fn pass_over(&mut self, processes: &[ProcStat], markers: &mut Markers) -> Found {
        if let Some(group) = self.group {
            table::kill_group(group);
        }
        let me = i32::try_from(std::process::id()).unwrap_or_default();
        let mut found = Found { live: 0, unsure: 0 };
        let mut empty = BTreeMap::new();
        {
            for process in processes {
                if process.pid == me
                    || process.zombie()
                    || process.kernel
                    || process.start < self.since
                {
                    continue;
                }
                let ours = if self.group == Some(process.pgrp) {
                    true
                } else {
                    match markers.of(process).map(|calls| calls.contains(&self.id)) {
                        Some(ours) => ours,
                        None => {
                            let key = (process.pid, process.start);
                            let seen = self.empty.get(&key).copied().unwrap_or(0) + 1;
                            if seen < EMPTY_PASSES {
                                found.unsure += 1;
                                empty.insert(key, seen);
                            }
                            false
                        }
                    }
                };
                if ours {
                    found.live += 1;
                    if table::kill_verified(process) {
                        self.killed += 1;
                    }
                }
            }
        }
        self.empty = empty;
        found
    }
}

/// Now, in clock ticks after boot (the unit of a process's start time), rounded down.
pub(crate) fn boot_ticks() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes one timespec to a valid pointer.
    let read = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) };
    // SAFETY: sysconf(3) reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if read != 0 || hz <= 0 {
        return 0;
    }
    let secs = u64::try_from(now.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(now.tv_nsec).unwrap_or(0);
    let hz = u64::try_from(hz).unwrap_or(100);
    // One tick of slack: the kernel rounds start times on its own clock.
    (secs * hz + nanos * hz / 1_000_000_000).saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_ids_are_32_lowercase_hex_digits() {
        let call = CallProcesses::new(true).map(|c| c.id.clone());
        assert!(call.as_deref().is_ok_and(is_call_id), "{call:?}");
        assert!(!is_call_id("") && !is_call_id("PATH") && !is_call_id(&"A".repeat(32)));
    }

    #[test]
    fn boot_ticks_is_after_this_process_started() {
        let me = table::stat(i32::try_from(std::process::id()).unwrap_or_default());
        assert!(me.is_some_and(|me| boot_ticks() + 1 >= me.start));
    }
}
