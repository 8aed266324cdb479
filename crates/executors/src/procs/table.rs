//! Reading the process table from `/proc`, and killing one process without hitting another that
//! took its pid.

use std::io::Read as _;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};

/// The few fields of `/proc/<pid>/stat` the supervisor needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: i32,
    /// `R`, `S`, `D`, `Z` (zombie), ...
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
    /// Start time in clock ticks after boot: with the pid, names one process for the whole uptime.
    pub start: u64,
    /// A kernel thread (no environment, never ours).
    pub kernel: bool,
}

impl ProcStat {
    /// Exited and waiting for its parent to reap it.
    pub fn zombie(&self) -> bool {
        self.state == 'Z'
    }
}

/// `PF_KTHREAD` in the flags of `/proc/<pid>/stat`.
const PF_KTHREAD: u64 = 0x0020_0000;

/// Parses `/proc/<pid>/stat`. The command name sits in parentheses and may itself hold spaces
/// and parentheses, so fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let (head, rest) = text.rsplit_once(')')?;
    let pid = head.split_once('(')?.0.trim().parse().ok()?;
    // After the name: state(3) ppid(4) pgrp(5) ... starttime(22).
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    // session(6) tty_nr(7) tpgid(8) flags(9)
    let flags: u64 = fields.nth(3)?.parse().ok()?;
    let start = fields.nth(12)?.parse().ok()?;
    Some(ProcStat {
        pid,
        state,
        ppid,
        pgrp,
        start,
        kernel: flags & PF_KTHREAD != 0,
    })
}

/// The stat of one process, if it exists.
pub fn stat(pid: i32) -> Option<ProcStat> {
    // A stat line is a few hundred bytes (the name is at most 64): no allocation per process.
    let mut buffer = [0u8; 1024];
    let mut file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    let mut len = 0;
    while len < buffer.len() {
        match file.read(&mut buffer[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(_) => return None,
        }
    }
    parse_stat(std::str::from_utf8(&buffer[..len]).ok()?)
}

/// Every process visible in `/proc` (threads are not listed). A process that exists for the
/// whole scan is in it; one that starts or ends during the scan may or may not be.
pub fn scan() -> Vec<ProcStat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(stat)
        .collect()
}

/// The children of `pid` (of every thread of it), from `/proc/<pid>/task/*/children`; empty
/// when it is gone. Needs a kernel that lists children ([`children_listed`]).
pub fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut children = Vec::new();
    for task in tasks.filter_map(Result::ok) {
        let path = task.path().join("children");
        if let Ok(text) = std::fs::read_to_string(path) {
            children.extend(
                text.split_ascii_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    children
}

/// The children of the threads `tasks` of process `pid` (from their `children` lists; a thread
/// that is gone has none).
pub fn children_of_tasks(pid: i32, tasks: &std::collections::BTreeSet<i32>) -> Vec<i32> {
    let mut children = Vec::new();
    for task in tasks {
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/task/{task}/children")) {
            children.extend(
                text.split_ascii_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    children
}

/// Whether this kernel lists a task's children (`CONFIG_PROC_CHILDREN`).
pub fn children_listed() -> bool {
    static LISTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *LISTED.get_or_init(|| std::path::Path::new("/proc/thread-self/children").exists())
}

/// `first` and every descendant of theirs, found by walking children lists down from them
/// (much cheaper than [`scan`] when the tree is small). Like it, a process that exists for the
/// whole walk is in it.
pub fn walk_down(first: Vec<i32>) -> Vec<ProcStat> {
    let mut found = Vec::new();
    let mut queue = first;
    let mut seen = std::collections::BTreeSet::new();
    while let Some(pid) = queue.pop() {
        if !seen.insert(pid) {
            continue;
        }
        if let Some(process) = stat(pid) {
            found.push(process);
            queue.extend(children(pid));
        }
    }
    found
}

/// Environments larger than this are not read further (Linux caps argv + envp near 2 MiB).
const ENVIRON_LIMIT: u64 = 4 << 20;

/// The values of variable `name` in the environment `pid` started with (every entry of that
/// name: a hand-made environment may hold several). Unreadable (another user's process, gone)
/// is `Some(empty)`; an empty environment is `None`, as for [`environ_has`].
pub fn environ_values(pid: i32, name: &str) -> Option<Vec<String>> {
    let Ok(file) = std::fs::File::open(format!("/proc/{pid}/environ")) else {
        return Some(Vec::new());
    };
    let mut bytes = Vec::new();
    if file.take(ENVIRON_LIMIT).read_to_end(&mut bytes).is_err() {
        return Some(Vec::new());
    }
    if bytes.is_empty() {
        return None;
    }
    let prefix = format!("{name}=");
    Some(
        bytes
            .split(|b| *b == 0)
            .filter_map(|item| item.strip_prefix(prefix.as_bytes()))
            .map(|value| String::from_utf8_lossy(value).into_owned())
            .collect(),
    )
}

/// True when the environment `pid` started with holds exactly the entry `entry` (`NAME=value`).
/// Unreadable (another user's process, gone) is `Some(false)`. An empty environment is `None`:
/// a process in the middle of `execve` shows one for a moment, before its new stack is set up.
pub fn environ_has(pid: i32, entry: &str) -> Option<bool> {
    let Ok(file) = std::fs::File::open(format!("/proc/{pid}/environ")) else {
        return Some(false);
    };
    let mut bytes = Vec::new();
    if file.take(ENVIRON_LIMIT).read_to_end(&mut bytes).is_err() {
        return Some(false);
    }
    if bytes.is_empty() {
        return None;
    }
    Some(
        bytes
            .split(|b| *b == 0)
            .any(|item| item == entry.as_bytes()),
    )
}

/// Sends SIGKILL to `target` if the process now holding its pid is still the one scanned (same
/// start time). The pid is pinned with a pidfd first, so the check and the signal are about the
/// same process even if it exits and its pid is reused in between. True when signalled.
pub fn kill_verified(target: &ProcStat) -> bool {
    // SAFETY: pidfd_open(2) takes a pid and flags and returns a new file descriptor or -1; no
    // memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, target.pid, 0) };
    let Ok(fd) = i32::try_from(fd) else {
        return false;
    };
    if fd < 0 {
        // No pidfd support (Linux < 5.3): check, then signal by pid (a window remains).
        if stat(target.pid).is_some_and(|now| now.start == target.start) {
            // SAFETY: kill(2) on a pid; no memory-safety preconditions.
            return unsafe { libc::kill(target.pid, libc::SIGKILL) } == 0;
        }
        return false;
    }
    // SAFETY: `fd` was just returned by pidfd_open and is owned by nothing else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(fd) };
    if stat(target.pid).is_none_or(|now| now.start != target.start) {
        return false;
    }
    // SAFETY: pidfd_send_signal(2) with a valid pidfd, a signal number, a null siginfo (allowed:
    // the kernel fills it as for kill(2)) and no flags.
    let sent = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    sent == 0
}

/// Sends SIGKILL to every process in group `pgid`; false when the group is gone.
pub fn kill_group(pgid: i32) -> bool {
    if pgid <= 1 {
        return false;
    }
    // SAFETY: kill(2) with a negative pid signals a process group; no memory-safety
    // preconditions. `pgid > 1` keeps it from meaning "every process" (-1).
    unsafe { libc::kill(-pgid, libc::SIGKILL) == 0 }
}

/// Whether any process is in group `pgid` (a zombie counts: it is there until reaped). A group
/// whose processes cannot be signalled by the daemon (EPERM) exists too.
pub fn group_exists(pgid: i32) -> bool {
    if pgid <= 1 {
        return false;
    }
    // SAFETY: kill(2) with signal 0 only checks for the group; no memory-safety preconditions.
    // `pgid > 1` keeps it from meaning "every process" (-1).
    let probed = unsafe { libc::kill(-pgid, 0) };
    probed == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// This boot's id: start times and pids mean nothing across a reboot.
pub fn boot_id() -> String {
    static BOOT_ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BOOT_ID
        .get_or_init(|| {
            std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .map(|id| id.trim().to_string())
                .unwrap_or_default()
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_is_parsed_from_the_last_parenthesis() {
        let line =
            "4242 (a) b (c)) S 17 4240 4240 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 1 2 3";
        assert_eq!(
            parse_stat(line),
            Some(ProcStat {
                pid: 4242,
                state: 'S',
                ppid: 17,
                pgrp: 4240,
                start: 987654,
                kernel: false,
            })
        );
        assert_eq!(parse_stat("12 (x) Z 1"), None);
        let kthread = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0";
        assert!(parse_stat(kthread).is_some_and(|p| p.kernel && p.start == 5));
    }

    #[test]
    fn this_process_is_in_the_scan_with_its_own_group() {
        let me = i32::try_from(std::process::id()).unwrap_or_default();
        let found = scan().into_iter().find(|p| p.pid == me);
        // SAFETY: getpgrp(2) cannot fail.
        let pgrp = unsafe { libc::getpgrp() };
        assert!(found.is_some_and(|p| p.pgrp == pgrp && !p.zombie()));
    }

    #[test]
    fn descendants_include_grandchildren() -> std::io::Result<()> {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .spawn()?;
        let pid = i32::try_from(child.id()).unwrap_or_default();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let me = i32::try_from(std::process::id()).unwrap_or_default();
        // The child is this thread's: its children list is where the walk starts.
        // SAFETY: gettid(2) takes no arguments and cannot fail.
        let tasks = std::collections::BTreeSet::from([unsafe { libc::gettid() }]);
        let mut family = Vec::new();
        while std::time::Instant::now() < deadline {
            family = walk_down(children_of_tasks(me, &tasks));
            if family.iter().any(|p| p.ppid == pid) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let _ = kill_children_of(pid, &family);
        child.kill()?;
        child.wait()?;
        assert!(
            !children_listed() || family.iter().any(|p| p.pid == pid),
            "{family:?}"
        );
        assert!(
            !children_listed() || family.iter().any(|p| p.ppid == pid),
            "{family:?}"
        );
        Ok(())
    }

    /// Kills the grandchildren a test started.
    fn kill_children_of(parent: i32, family: &[ProcStat]) -> usize {
        family
            .iter()
            .filter(|p| p.ppid == parent)
            .filter(|p| kill_verified(p))
            .count()
    }

    #[test]
    fn environ_entries_match_whole() -> std::io::Result<()> {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("CANOPY_TEST_MARK", "abc")
            .spawn()?;
        let pid = i32::try_from(child.id()).unwrap_or_default();
        // The child may still be inside execve: poll (bounded) until its environment shows.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while environ_has(pid, "CANOPY_TEST_MARK=abc").is_none()
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let whole = environ_has(pid, "CANOPY_TEST_MARK=abc") == Some(true);
        let prefix = environ_has(pid, "CANOPY_TEST_MARK=ab") == Some(true);
        let stale = ProcStat {
            start: stat(pid).map_or(0, |s| s.start + 1),
            ..stat(pid).unwrap_or(ProcStat {
                pid,
                state: 'S',
                ppid: 0,
                pgrp: 0,
                start: 0,
                kernel: false,
            })
        };
        let wrong_start_spared = !kill_verified(&stale);
        let killed = stat(pid).is_some_and(|s| kill_verified(&s));
        child.wait()?;
        assert!(whole && !prefix, "whole {whole}, prefix {prefix}");
        assert!(
            wrong_start_spared,
            "a process with another start time was signalled"
        );
        assert!(killed);
        Ok(())
    }
}
