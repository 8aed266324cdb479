//! The durable record of the process groups calls have running: one small JSON file per
//! `run-command` call in the data dir's `procs/`, written before the process is spawned,
//! completed with its group right after, and removed once nothing of the call is left.
//!
//! A daemon that dies (SIGKILL, a crash) leaves its files behind; the next start reads them and
//! kills what is still running ([`recover`]). A file is only a hint: a process is killed only
//! if it proves it belongs to the call named there -- its environment carries that call's
//! marker, and for a whole group, the group leader is alive with the recorded start time and
//! the marker. A planted or stale file cannot make the daemon kill anything else.
//!
//! The files are not fsynced: a daemon crash does not lose the page cache, and a power loss
//! takes the processes with it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
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
    /// The leader's start time, in clock ticks after boot.
    pub start: Option<u64>,
}

/// The `procs/` folder.
#[derive(Debug, Clone)]
pub struct Ledger {
    dir: PathBuf,
}

impl Ledger {
    /// Opens (creating, private) the folder.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    fn path(&self, call: &str) -> PathBuf {
        self.dir.join(format!("{call}.json"))
    }

    /// Creates a call's file (private, never an existing one) holding `entry`.
    pub fn create(&self, entry: &Entry) -> std::io::Result<Record> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let path = self.path(&entry.call);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        let record = Record { file, path };
        record.update(entry)?;
        Ok(record)
    }
}

/// Bytes of every record: one `pwrite` replaces it whole, which a SIGKILL cannot cut in half
/// (a rename per update costs ten times more on ext4).
const RECORD_LEN: usize = 256;

/// One call's open file.
#[derive(Debug)]
pub struct Record {
    file: std::fs::File,
    path: PathBuf,
}

impl Record {
    /// Rewrites the record whole, in place (JSON padded with spaces to [`RECORD_LEN`]).
    pub fn update(&self, entry: &Entry) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt as _;
        let mut bytes = serde_json::to_vec(entry)?;
        if bytes.len() >= RECORD_LEN {
            return Err(std::io::Error::other("process record too long"));
        }
        bytes.resize(RECORD_LEN - 1, b' ');
        bytes.push(b'\n');
        self.file.write_all_at(&bytes, 0)
    }

    /// Removes the file: nothing of the call is left.
    pub fn remove(self) {
        match std::fs::remove_file(&self.path) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => {
                tracing::warn!(path = %self.path.display(), %err, "cannot remove a process record");
            }
        }
    }
}

impl Ledger {
    /// Every file, parsed when it can be.
    fn files(&self) -> Vec<(PathBuf, Option<Entry>)> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.is_file())
            .map(|path| {
                let entry = std::fs::read(&path)
                    .ok()
                    .and_then(|bytes| serde_json::from_slice::<Entry>(&bytes).ok())
                    .filter(|entry| is_call_id(&entry.call));
                (path, entry)
            })
            .collect()
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

/// Kills (when `kill`) the processes the calls recorded in `ledger` left running, then clears
/// the records.
pub async fn recover(ledger: &Ledger, kill: bool) -> Recovery {
    let boot = table::boot_id();
    let mut calls: BTreeMap<String, Entry> = BTreeMap::new();
    for (path, entry) in ledger.files() {
        match entry {
            Some(entry) if entry.boot_id == boot && !boot.is_empty() => {
                calls.insert(marker_entry(&entry.call), entry);
            }
            // Another boot's processes are gone; a file we cannot read names nothing.
            _ => {}
        }
        let _ = std::fs::remove_file(&path);
    }
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

/// The leader of a recorded group: alive at the recorded pid, with the recorded start time and
/// the call's marker.
fn verified_leader(calls: &BTreeMap<String, Entry>, process: &ProcStat) -> bool {
    calls.iter().any(|(marker, entry)| {
        entry.pgid == Some(process.pid)
            && entry.start == Some(process.start)
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

    #[test]
    fn records_round_trip_and_unreadable_files_name_nothing() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let ledger = Ledger::open(&dir.path().join("procs"))?;
        let entry = Entry {
            call: "0123456789abcdef0123456789abcdef".into(),
            boot_id: table::boot_id(),
            pgid: Some(42),
            start: Some(7),
        };
        let record = ledger.create(&entry)?;
        record.update(&Entry {
            pgid: Some(4242),
            ..entry.clone()
        })?;
        record.update(&entry)?;
        assert!(
            ledger.create(&entry).is_err(),
            "an existing record was replaced"
        );
        std::fs::write(dir.path().join("procs/junk.json"), "{not json")?;
        let bad_id = Entry {
            call: "../../etc/passwd".into(),
            ..entry.clone()
        };
        std::fs::write(
            dir.path().join("procs/bad.json"),
            serde_json::to_vec(&bad_id)?,
        )?;
        let mut parsed: Vec<Option<Entry>> = ledger.files().into_iter().map(|(_, e)| e).collect();
        parsed.sort_by_key(Option::is_some);
        assert_eq!(parsed, [None, None, Some(entry.clone())]);
        record.remove();
        assert_eq!(ledger.files().len(), 2);
        Ok(())
    }
}
