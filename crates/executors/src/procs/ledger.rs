//! The durable record of the process groups calls have running: one slot of a file in the
//! data dir's `procs/` per `run-command` call, written before the process is spawned,
//! completed with its group right after, and blanked once nothing of the call is left. A slot
//! is one `pwrite` of [`RECORD_LEN`] bytes at its own offset: no file is created or removed per
//! call (an inode allocated and freed on ext4 cost more than the rest of the record).
//!
//! A daemon that dies (SIGKILL, a crash) leaves its slots filled; the next start reads them and
//! kills what is still running ([`recover`]). A record is only a hint: a process is killed only
//! if it proves it belongs to the call named there -- its environment carries that call's
//! marker, and for a whole group, the group leader is alive, started no earlier than the
//! recorded tick, and carries the marker. A planted or stale record cannot make the daemon kill
//! anything else.
//!
//! The file is not fsynced: a daemon crash does not lose the page cache, and a power loss
//! takes the processes with it. Files of the one-file-per-call layout of earlier versions
//! (`<call>.json`) are read at recovery too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::table::{self, ProcStat};
use super::{is_call_id, marker_entry};

/// One call's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The call's marker value (`CANOPY_CALL_ID`).
    pub call: String,
    /// The boot the pids and start times belong to.
    pub boot_id: String,
    /// The process group (= the leader's pid), once spawned.
    pub pgid: Option<i32>,
    /// A clock tick after boot at or before the leader's start (the call's start: the leader
    /// started at or after it).
    pub start: Option<u64>,
}

/// The name of the slot file in `procs/`.
const SLOTS: &str = "slots";

/// Bytes of every record: one `pwrite` replaces it whole, which a SIGKILL cannot cut in half.
const RECORD_LEN: usize = 256;

/// The `procs/` folder and its slot file.
#[derive(Debug, Clone)]
pub struct Ledger {
    dir: PathBuf,
    slots: Arc<Slots>,
}

/// The open slot file and the slots free in it.
#[derive(Debug)]
struct Slots {
    file: std::fs::File,
    /// The slots freed, lowest first out, and how many slots the file has: it stays as small
    /// as the most calls ever in flight at once.
    free: Mutex<(BTreeSet<u64>, u64)>,
}

impl Ledger {
    /// Opens (creating, private) the folder and its slot file. What an earlier daemon left in
    /// the file is there for [`recover`] until it runs.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(dir.join(SLOTS))?;
        let used = file.metadata()?.len().div_ceil(RECORD_LEN as u64);
        Ok(Self {
            dir: dir.to_path_buf(),
            slots: Arc::new(Slots {
                file,
                // Filled slots of an earlier daemon stay untouched until recovery clears them.
                free: Mutex::new((BTreeSet::new(), used)),
            }),
        })
    }

    /// Takes a slot and writes `entry` in it.
    pub fn create(&self, entry: &Entry) -> std::io::Result<Record> {
        let slot = {
            let mut free = self
                .slots
                .free
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match free.0.pop_first() {
                Some(slot) => slot,
                None => {
                    free.1 += 1;
                    free.1 - 1
                }
            }
        };
        let record = Record {
            slots: self.slots.clone(),
            slot,
        };
        record.update(entry)?;
        Ok(record)
    }
}

/// One call's slot, freed when dropped (blanked first by [`Record::remove`]; a record dropped
/// without it keeps its entry for the next start, and its slot is not reused).
#[derive(Debug)]
pub struct Record {
    slots: Arc<Slots>,
    slot: u64,
}

impl Record {
    /// Rewrites the record whole, in place (JSON padded with spaces to [`RECORD_LEN`]).
    pub fn update(&self, entry: &Entry) -> std::io::Result<()> {
        let mut bytes = serde_json::to_vec(entry)?;
        if bytes.len() >= RECORD_LEN {
            return Err(std::io::Error::other("process record too long"));
        }
        bytes.resize(RECORD_LEN - 1, b' ');
        bytes.push(b'\n');
        self.write(&bytes)
    }

    fn write(&self, bytes: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt as _;
        self.slots
            .file
            .write_all_at(bytes, self.slot * RECORD_LEN as u64)
    }

    /// Blanks the record and frees its slot: nothing of the call is left.
    pub fn remove(self) {
        let mut blank = vec![b' '; RECORD_LEN - 1];
        blank.push(b'\n');
        match self.write(&blank) {
            Ok(()) => {
                self.slots
                    .free
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
                    .insert(self.slot);
            }
            Err(err) => {
                tracing::warn!(slot = self.slot, %err, "cannot clear a process record");
            }
        }
    }
}

fn parse(bytes: &[u8]) -> Option<Entry> {
    serde_json::from_slice::<Entry>(bytes.trim_ascii())
        .ok()
        .filter(|entry| is_call_id(&entry.call))
}

impl Ledger {
    /// Every record left: the filled slots, and the files of the earlier layout (each parsed
    /// when it can be). Blank slots are not listed.
    fn records(&self) -> Vec<Option<Entry>> {
        let mut found: Vec<Option<Entry>> = std::fs::read(self.dir.join(SLOTS))
            .unwrap_or_default()
            .chunks(RECORD_LEN)
            .filter(|chunk| !chunk.trim_ascii().is_empty())
            .map(parse)
            .collect();
        for (path, entry) in self.legacy_files() {
            found.push(entry);
            let _ = std::fs::remove_file(&path);
        }
        found
    }

    /// The `<call>.json` files of the earlier layout.
    fn legacy_files(&self) -> Vec<(PathBuf, Option<Entry>)> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.is_file() && path.extension().is_some_and(|e| e == "json"))
            .map(|path| {
                let entry = std::fs::read(&path).ok().and_then(|bytes| parse(&bytes));
                (path, entry)
            })
            .collect()
    }

    /// Forgets every record (after recovery, before any call runs).
    fn clear(&self) {
        if let Err(err) = self.slots.file.set_len(0) {
            tracing::warn!(%err, "cannot clear the process records");
            return;
        }
        *self
            .slots
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = (BTreeSet::new(), 0);
    }
}

/// What [`recover`] found and did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Calls recorded by the last daemon on this boot.
    pub recorded: usize,
    /// Processes killed.
    pub killed: usize,
    /// Processes of recorded calls still alive when it gave up (or left alone: `kill` false).
    pub left: usize,
}

/// How long [`recover`] keeps killing (processes may fork while it does).
const RECOVER_LIMIT: Duration = Duration::from_secs(3);

/// Kills (when `kill`) the processes the calls recorded in `ledger` left running; the records
/// are cleared first (call it before any call runs).
pub async fn recover(ledger: &Ledger, kill: bool) -> Recovery {
    let boot = table::boot_id();
    let mut calls: BTreeMap<String, Entry> = BTreeMap::new();
    for entry in ledger.records() {
        match entry {
            Some(entry) if entry.boot_id == boot && !boot.is_empty() => {
                calls.insert(marker_entry(&entry.call), entry);
            }
            // Another boot's processes are gone; a record we cannot read names nothing.
            _ => {}
        }
    }
    ledger.clear();
    let mut recovery = Recovery {
        recorded: calls.len(),
        ..Recovery::default()
    };
    if calls.is_empty() {
        return recovery;
    }
    let me = i32::try_from(std::process::id()).unwrap_or_default();
    let deadline = tokio::time::Instant::now() + RECOVER_LIMIT;
    let mut killed: BTreeSet<(i32, u64)> = BTreeSet::new();
    let mut clean_scans = 0;
    loop {
        let processes = table::scan();
        let ours: Vec<&ProcStat> = processes
            .iter()
            .filter(|p| p.pid != me && !p.zombie() && !p.kernel)
            .filter(|p| {
                calls
                    .keys()
                    .any(|marker| table::environ_has(p.pid, marker) == Some(true))
                    || verified_group(&calls, p)
            })
            .collect();
        if !kill {
            recovery.left = ours.len();
            return recovery;
        }
        for process in &ours {
            if process.pid == process.pgrp && verified_leader(&calls, process) {
                table::kill_group(process.pgrp);
            }
            // Counted whether this signal or the group's got there first.
            table::kill_verified(process);
            killed.insert((process.pid, process.start));
        }
        clean_scans = if ours.is_empty() { clean_scans + 1 } else { 0 };
        recovery.killed = killed.len();
        if clean_scans >= 2 {
            return recovery;
        }
        if tokio::time::Instant::now() >= deadline {
            recovery.left = ours.len();
            return recovery;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The leader of a recorded group: alive at the recorded pid, started at or after the recorded
/// tick, and carrying the call's marker (which no process outside the call has: the pid's
/// reuse by another process is told by it).
fn verified_leader(calls: &BTreeMap<String, Entry>, process: &ProcStat) -> bool {
    calls.iter().any(|(marker, entry)| {
        entry.pgid == Some(process.pid)
            && entry.start.is_some_and(|start| process.start >= start)
            && table::environ_has(process.pid, marker) == Some(true)
    })
}

/// A member of a recorded group whose leader is verified (a member that dropped the marker from
/// its environment still goes with its group).
fn verified_group(calls: &BTreeMap<String, Entry>, process: &ProcStat) -> bool {
    calls.values().any(|entry| entry.pgid == Some(process.pgrp))
        && table::stat(process.pgrp).is_some_and(|leader| {
            !leader.zombie() && leader.pgrp == leader.pid && verified_leader(calls, &leader)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(call: &str, pgid: i32) -> Entry {
        Entry {
            call: call.into(),
            boot_id: table::boot_id(),
            pgid: Some(pgid),
            start: Some(7),
        }
    }

    #[test]
    fn records_round_trip_free_their_slots_and_unreadable_ones_name_nothing() -> std::io::Result<()>
    {
        let dir = tempfile::tempdir()?;
        let procs = dir.path().join("procs");
        let ledger = Ledger::open(&procs)?;
        let one = entry("0123456789abcdef0123456789abcdef", 42);
        let two = entry("fedcba9876543210fedcba9876543210", 43);
        let first = ledger.create(&one)?;
        first.update(&Entry {
            pgid: Some(4242),
            ..one.clone()
        })?;
        first.update(&one)?;
        let second = ledger.create(&two)?;
        assert_eq!(ledger.records(), [Some(one.clone()), Some(two.clone())]);
        first.remove();
        assert_eq!(ledger.records(), [Some(two.clone())]);
        // The freed slot is taken again: the file does not grow.
        let third = ledger.create(&one)?;
        assert_eq!(
            std::fs::metadata(procs.join(SLOTS))?.len(),
            2 * RECORD_LEN as u64
        );
        assert_eq!(ledger.records(), [Some(one.clone()), Some(two.clone())]);
        // A file of the earlier layout is read (once), a bad one names nothing.
        std::fs::write(procs.join("junk.json"), "{not json")?;
        let bad_id = Entry {
            call: "../../etc/passwd".into(),
            ..one.clone()
        };
        std::fs::write(procs.join("bad.json"), serde_json::to_vec(&bad_id)?)?;
        let mut found = ledger.records();
        found.sort_by_key(Option::is_some);
        assert_eq!(found.iter().filter(|e| e.is_none()).count(), 2);
        assert_eq!(ledger.records().len(), 2, "the old files were read once");
        second.remove();
        third.remove();
        assert_eq!(ledger.records(), Vec::<Option<Entry>>::new());
        Ok(())
    }

    #[test]
    fn a_new_ledger_sees_what_the_last_daemon_left_until_it_is_cleared() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let procs = dir.path().join("procs");
        let left = entry("0123456789abcdef0123456789abcdef", 42);
        {
            let ledger = Ledger::open(&procs)?;
            let record = ledger.create(&left)?;
            // The daemon dies with the call in flight: the record is never removed.
            std::mem::forget(record);
        }
        let ledger = Ledger::open(&procs)?;
        assert_eq!(ledger.records(), [Some(left.clone())]);
        // A new call does not overwrite the slot that is still filled.
        let fresh = ledger.create(&entry("fedcba9876543210fedcba9876543210", 43))?;
        assert_eq!(ledger.records().len(), 2);
        ledger.clear();
        drop(fresh);
        assert_eq!(ledger.records(), Vec::<Option<Entry>>::new());
        Ok(())
    }
}
