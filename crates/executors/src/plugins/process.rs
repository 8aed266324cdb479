//! Running a process for a plugin: a clean environment, its own process group, bounded output,
//! a hard deadline, and nothing left behind when the call ends (see [`crate::procs`]).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::procs::{self, CallProcesses};

/// Bytes of stdout / stderr kept (the last ones).
pub const OUTPUT_LIMIT: usize = 64 * 1024;

/// How long the output pipes may stay open after the process exits (held by children it left
/// behind) before the host stops waiting for them.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// How long to wait for the pipes once everything the call left was killed.
const CLOSE_GRACE: Duration = Duration::from_millis(500);

/// A process to run.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    /// What to execute: a name looked up on `PATH`, or a path.
    pub program: String,
    /// `argv[0]`, when it differs from `program` (a program resolved by the host).
    pub arg0: Option<String>,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    /// Set on top of the clean environment (see [`crate::procs::env`]).
    pub env: Vec<(String, String)>,
    pub stdin: Option<Vec<u8>>,
    /// A file to read as stdin, when `stdin` gives no bytes.
    pub stdin_file: Option<PathBuf>,
    pub timeout: Duration,
    /// Path handed to the process as `CANOPY_RESULT_FILE`, read back after it exits.
    pub result_file: Option<PathBuf>,
    /// Leave what the process starts running after it exits (`detach = true`); otherwise the
    /// whole call -- its group and every process carrying its marker -- is killed.
    pub detach: bool,
    /// When one of these fires (a planned stop forcing what is left, a cron replaced by its
    /// next firing), the process group is killed and the exit says `interrupted`.
    pub stops: Vec<StopSignal>,
    /// Not spawned before this instant: work prepared ahead of its time (a cron firing) starts
    /// on the mark.
    pub not_before: Option<tokio::time::Instant>,
}

/// Tells running commands to stop: firing it kills their process groups.
#[derive(Debug)]
pub struct StopSwitch(tokio::sync::watch::Sender<bool>);

impl Default for StopSwitch {
    fn default() -> Self {
        Self(tokio::sync::watch::channel(false).0)
    }
}

impl StopSwitch {
    /// Stops every command watching this switch, now and from now on.
    pub fn fire(&self) {
        self.0.send_replace(true);
    }

    /// A signal commands watch.
    pub fn signal(&self) -> StopSignal {
        StopSignal(self.0.subscribe())
    }
}

/// The watching end of a [`StopSwitch`].
#[derive(Debug, Clone)]
pub struct StopSignal(tokio::sync::watch::Receiver<bool>);

impl StopSignal {
    /// Whether the switch has fired.
    pub fn fired(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the switch fires (never, if it is dropped unfired).
    async fn wait(mut self) {
        if self.0.wait_for(|fired| *fired).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Resolves once any of `stops` fires.
async fn any_stop(stops: Vec<StopSignal>) {
    if stops.is_empty() {
        return std::future::pending().await;
    }
    futures_util::future::select_all(stops.into_iter().map(|s| Box::pin(s.wait()))).await;
}

/// How it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessExit {
    pub code: Option<i32>,
    pub timed_out: bool,
    /// Killed because a stop signal fired (see [`ProcessSpec::stops`]).
    pub interrupted: bool,
    pub stdout: String,
    pub stderr: String,
    pub duration: Duration,
    pub result: Option<String>,
}

/// Runs the process to completion or to its deadline, then kills what is left of the call.
pub async fn run(spec: ProcessSpec) -> std::io::Result<ProcessExit> {
    if let Some(at) = spec.not_before {
        tokio::time::sleep_until(at).await;
    }
    let started = Instant::now();
    if spec.stops.iter().any(StopSignal::fired) {
        return Err(std::io::Error::other(
            "not started: the work was stopped (the daemon is stopping, or it was replaced)",
        ));
    }
    // Recorded before the spawn: a daemon that dies from here on leaves a trace of this call.
    let mut call = CallProcesses::new(spec.detach)?;
    // The child's PATH: the plugin's, if it sets one, else the one every process inherits.
    let path_var = spec
        .env
        .iter()
        .rev()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| std::ffi::OsString::from(value))
        .or_else(|| {
            procs::inherited_env()
                .into_iter()
                .find(|(name, _)| name == "PATH")
                .map(|(_, value)| value)
        });
    let mut command = crate::procs::umask::user_command(
        &spec.program,
        spec.arg0.as_deref(),
        &spec.args,
        path_var.as_ref(),
    );
    let stdin = match (&spec.stdin, &spec.stdin_file) {
        (Some(_), _) => Stdio::piped(),
        (None, Some(path)) => Stdio::from(std::fs::File::open(path).map_err(|err| {
            std::io::Error::new(
                err.kind(),
                format!("cannot open {} for its stdin: {err}", path.display()),
            )
        })?),
        (None, None) => Stdio::null(),
    };
    command
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(procs::inherited_env())
        .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(path) = &spec.result_file {
        command.env("CANOPY_RESULT_FILE", path);
    }
    // The daemon's own files are private (umask 077); what a command creates in the user's
    // workdir gets the user's umask (see `user_command`).
    // Last, so the plugin's env cannot choose it.
    let (marker, id) = call.marker();
    command.env(marker, id);
    // Whatever happens to this future from here (a deadline, a reset that drops it), `call`
    // kills the group and sweeps the rest when dropped.
    let mut child = call.spawn(command).await?;

    if let (Some(bytes), Some(mut stdin)) = (spec.stdin, child.stdin.take()) {
        tokio::spawn(async move {
            // A process that does not read its stdin is not an error.
            let _ = stdin.write_all(&bytes).await;
        });
    }
    let out = Tail::default();
    let err = Tail::default();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let reading = {
        let (out, err) = (out.clone(), err.clone());
        async move {
            tokio::join!(read_tail(stdout, out), read_tail(stderr, err));
        }
    };
    tokio::pin!(reading);

    // Read and wait together, in this task; no task hop per process.
    let deadline = tokio::time::Instant::now() + spec.timeout;
    let mut drained = false;
    let stopped = any_stop(spec.stops);
    tokio::pin!(stopped);
    let (status, timed_out, interrupted) = loop {
        tokio::select! {
            () = &mut reading, if !drained => drained = true,
            () = &mut stopped => {
                call.kill_group();
                break (child.wait().await.ok(), false, true);
            }
            waited = tokio::time::timeout_at(deadline, child.wait()) => match waited {
                Ok(status) => break (Some(status?), false, false),
                Err(_) => {
                    call.kill_group();
                    break (child.wait().await.ok(), true, false);
                }
            },
        }
    };
    call.leader_reaped();
    // Children left behind may hold the pipes open; give them a moment to finish writing.
    if !drained {
        let drain_until = deadline.min(tokio::time::Instant::now() + DRAIN_GRACE);
        drained = tokio::time::timeout_at(drain_until, &mut reading)
            .await
            .is_ok();
    }
    let detach = spec.detach;
    let killed = call.finish().await;
    if killed > 0 {
        tracing::debug!(program = %spec.program, killed, "killed processes the command left behind");
    }
    if !drained && !detach {
        // Everything of the call is dead now: the pipes close.
        let _ = tokio::time::timeout(CLOSE_GRACE, &mut reading).await;
    }

    let result = match &spec.result_file {
        Some(path) => read_result_file(path),
        None => None,
    };
    Ok(ProcessExit {
        code: status.and_then(|s| s.code()),
        timed_out,
        interrupted,
        stdout: out.text(),
        stderr: err.text(),
        duration: started.elapsed(),
        result,
    })
}

/// The last [`OUTPUT_LIMIT`] bytes read from a pipe so far; shared, so what was read is kept
/// even when the host stops waiting for the pipe to close.
#[derive(Debug, Clone, Default)]
struct Tail(Arc<Mutex<VecDeque<u8>>>);

impl Tail {
    fn push(&self, bytes: &[u8]) {
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        kept.extend(bytes);
        let excess = kept.len().saturating_sub(OUTPUT_LIMIT);
        kept.drain(..excess);
    }

    fn text(&self) -> String {
        let kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let (front, back) = kept.as_slices();
        let mut bytes = Vec::with_capacity(kept.len());
        bytes.extend_from_slice(front);
        bytes.extend_from_slice(back);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// Reads a pipe to its end into `tail`.
async fn read_tail(pipe: Option<impl AsyncRead + Unpin>, tail: Tail) {
    let Some(mut pipe) = pipe else {
        return;
    };
    let mut buffer = [0u8; 8192];
    loop {
        match pipe.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => tail.push(&buffer[..n]),
        }
    }
}

/// Reads (at most [`OUTPUT_LIMIT`] bytes of) the result file and removes it. A missing file is
/// the common case: read directly rather than through the blocking pool.
fn read_result_file(path: &std::path::Path) -> Option<String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).ok()?;
    let mut bytes = Vec::new();
    let read = file.take(OUTPUT_LIMIT as u64).read_to_end(&mut bytes);
    let _ = std::fs::remove_file(path);
    read.ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(script: &str, timeout: Duration) -> ProcessSpec {
        ProcessSpec {
            program: "sh".into(),
            arg0: None,
            args: vec!["-c".into(), script.into()],
            cwd: std::env::temp_dir(),
            env: vec![("GREETING".into(), "hi".into())],
            stdin: Some(b"from stdin".to_vec()),
            stdin_file: None,
            timeout,
            result_file: None,
            detach: false,
            stops: Vec::new(),
            not_before: None,
        }
    }

    #[tokio::test]
    async fn reports_code_output_env_and_stdin() -> std::io::Result<()> {
        let exit = run(spec(
            "echo $GREETING; cat; echo oops >&2; exit 3",
            Duration::from_secs(10),
        ))
        .await?;
        assert_eq!(exit.code, Some(3));
        assert_eq!(exit.stdout, "hi\nfrom stdin");
        assert_eq!(exit.stderr, "oops\n");
        assert!(!exit.timed_out);
        Ok(())
    }

    /// True while `pid` is a live (not zombie) process.
    fn alive(pid: &str) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|stat| {
                let state = stat.rsplit(')').next().unwrap_or_default().trim_start();
                !state.starts_with('Z')
            })
            .unwrap_or(false)
    }

    #[tokio::test]
    async fn kills_the_whole_group_at_the_deadline() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let pid_file = dir.path().join("orphan.pid");
        let script = format!("sleep 30 & echo $! > {}; wait", pid_file.display());
        let exit = run(spec(&script, Duration::from_millis(300))).await?;
        assert!(exit.timed_out);
        assert_eq!(exit.code, None);
        assert!(
            exit.duration < Duration::from_secs(5),
            "took {:?}",
            exit.duration
        );
        let orphan = std::fs::read_to_string(&pid_file)?.trim().to_string();
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive(&orphan) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            !alive(&orphan),
            "the background child {orphan} survived the group kill"
        );
        Ok(())
    }

    /// Waits (bounded) until `pid` is no longer a live process.
    async fn wait_dead(pid: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive(pid) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        !alive(pid)
    }

    #[tokio::test]
    async fn the_environment_is_clean_but_for_path_the_plugin_env_and_the_marker()
    -> std::io::Result<()> {
        // Cargo runs tests with CARGO_* variables set: none may reach the process.
        assert!(std::env::var_os("CARGO_PKG_NAME").is_some());
        let exit = run(spec("env", Duration::from_secs(10))).await?;
        let names: Vec<&str> = exit
            .stdout
            .lines()
            .filter_map(|line| line.split_once('=').map(|(name, _)| name))
            .collect();
        for name in &names {
            assert!(
                crate::procs::env::BASE.contains(name)
                    || ["GREETING", "CANOPY_CALL_ID", "PWD", "SHLVL", "_"].contains(name),
                "{name} leaked into the process: {names:?}"
            );
        }
        assert!(names.contains(&"PATH") && names.contains(&"GREETING"));
        Ok(())
    }

    #[tokio::test]
    async fn a_background_child_is_killed_after_a_normal_exit() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let pid_file = dir.path().join("bg.pid");
        let script = format!(
            "sleep 30 > /dev/null 2>&1 & echo $! > {}",
            pid_file.display()
        );
        let exit = run(spec(&script, Duration::from_secs(10))).await?;
        assert_eq!(exit.code, Some(0));
        let orphan = std::fs::read_to_string(&pid_file)?.trim().to_string();
        assert!(wait_dead(&orphan).await, "{orphan} outlived its call");
        Ok(())
    }

    #[tokio::test]
    async fn a_setsid_escapee_is_found_by_its_marker() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let pid_file = dir.path().join("escapee.pid");
        let script = format!(
            "setsid sleep 30 > /dev/null 2>&1 & echo $! > {}; sleep 30",
            pid_file.display()
        );
        let exit = run(spec(&script, Duration::from_millis(500))).await?;
        assert!(exit.timed_out);
        let escapee = std::fs::read_to_string(&pid_file)?.trim().to_string();
        assert!(wait_dead(&escapee).await, "{escapee} outlived its call");
        Ok(())
    }

    #[tokio::test]
    async fn a_stop_kills_the_group_and_keeps_the_output_so_far() -> std::io::Result<()> {
        let switch = StopSwitch::default();
        let dir = tempfile::tempdir()?;
        let ready = dir.path().join("ready");
        let script = format!("echo started; touch {}; exec sleep 60", ready.display());
        let running = tokio::spawn(run(ProcessSpec {
            stops: vec![switch.signal()],
            ..spec(&script, Duration::from_secs(30))
        }));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ready.exists() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        switch.fire();
        let exit = tokio::time::timeout(Duration::from_secs(5), running)
            .await
            .map_err(std::io::Error::other)?
            .map_err(std::io::Error::other)??;
        assert!(exit.interrupted && !exit.timed_out);
        assert_eq!(exit.code, None);
        assert_eq!(exit.stdout, "started\n");
        let refused = run(ProcessSpec {
            stops: vec![switch.signal()],
            ..spec("true", Duration::from_secs(5))
        })
        .await;
        assert!(refused.is_err(), "a fired switch starts nothing");
        Ok(())
    }

    #[tokio::test]
    async fn a_detached_command_leaves_its_children_running() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let pid_file = dir.path().join("bg.pid");
        let script = format!(
            "sleep 30 > /dev/null 2>&1 & echo $! > {}",
            pid_file.display()
        );
        let exit = run(ProcessSpec {
            detach: true,
            ..spec(&script, Duration::from_secs(10))
        })
        .await?;
        assert_eq!(exit.code, Some(0));
        let child = std::fs::read_to_string(&pid_file)?.trim().to_string();
        let was_alive = alive(&child);
        if let Ok(pid) = child.parse::<i32>() {
            // SAFETY: kill(2) on the pid the script reported; cleanup only.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        assert!(was_alive, "the detached child {child} was killed");
        Ok(())
    }

    #[tokio::test]
    async fn keeps_only_the_tail_of_large_output() -> std::io::Result<()> {
        let exit = run(spec(
            "head -c 200000 /dev/zero | tr '\\0' a; echo END",
            Duration::from_secs(10),
        ))
        .await?;
        assert_eq!(exit.stdout.len(), OUTPUT_LIMIT);
        assert!(exit.stdout.ends_with("aEND\n"));
        Ok(())
    }
}
