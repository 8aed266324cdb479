//! Running a process for a plugin: its own process group, bounded output, a hard deadline.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// Bytes of stdout / stderr kept (the last ones).
pub const OUTPUT_LIMIT: usize = 64 * 1024;

/// How long the output pipes may stay open after the process exits (held by children it left
/// behind) before the whole group is killed.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// A process to run.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    pub program: String,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    pub stdin: Option<Vec<u8>>,
    pub timeout: Duration,
    /// Path handed to the process as `CANOPY_RESULT_FILE`, read back after it exits.
    pub result_file: Option<PathBuf>,
}

/// How it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessExit {
    pub code: Option<i32>,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
    pub duration: Duration,
    pub result: Option<String>,
}

/// Runs the process to completion or to its deadline, then kills its process group.
pub async fn run(spec: ProcessSpec) -> std::io::Result<ProcessExit> {
    let started = Instant::now();
    let mut command = tokio::process::Command::new(&spec.program);
    command
        .args(&spec.args)
        .current_dir(&spec.cwd)
        .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(path) = &spec.result_file {
        command.env("CANOPY_RESULT_FILE", path);
    }
    let mut child = command.spawn()?;
    // Whatever happens to this future (a deadline, a reset that drops it), the group dies.
    let mut group = GroupGuard(child.id().and_then(|id| i32::try_from(id).ok()));

    if let (Some(bytes), Some(mut stdin)) = (spec.stdin, child.stdin.take()) {
        tokio::spawn(async move {
            // A process that does not read its stdin is not an error.
            let _ = stdin.write_all(&bytes).await;
        });
    }
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let reading = async move {
        let out = async {
            match stdout {
                Some(pipe) => read_tail(pipe).await,
                None => Vec::new(),
            }
        };
        let err = async {
            match stderr {
                Some(pipe) => read_tail(pipe).await,
                None => Vec::new(),
            }
        };
        tokio::join!(out, err)
    };
    tokio::pin!(reading);

    // Read and wait together, in this task; no task hop per process.
    let deadline = tokio::time::Instant::now() + spec.timeout;
    let mut output = None;
    let (status, timed_out) = loop {
        tokio::select! {
            read = &mut reading, if output.is_none() => output = Some(read),
            waited = tokio::time::timeout_at(deadline, child.wait()) => match waited {
                Ok(status) => break (Some(status?), false),
                Err(_) => {
                    group.kill();
                    break (child.wait().await.ok(), true);
                }
            },
        }
    };
    // Children left in the group may hold the pipes open; give them a moment, then kill them.
    let (stdout, stderr) = match output {
        Some(read) => read,
        None => {
            let drain_until = deadline.min(tokio::time::Instant::now() + DRAIN_GRACE);
            match tokio::time::timeout_at(drain_until, &mut reading).await {
                Ok(read) => read,
                Err(_) => {
                    group.kill();
                    (Vec::new(), Vec::new())
                }
            }
        }
    };
    if timed_out {
        group.kill();
    }
    group.disarm();

    let result = match &spec.result_file {
        Some(path) => read_result_file(path),
        None => None,
    };
    Ok(ProcessExit {
        code: status.and_then(|s| s.code()),
        timed_out,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        duration: started.elapsed(),
        result,
    })
}

/// Kills a process group when dropped (unless disarmed), so a call that is abandoned midway --
/// a reset, a daemon shutdown -- leaves no process behind.
struct GroupGuard(Option<i32>);

impl GroupGuard {
    fn kill(&self) {
        if let Some(pgid) = self.0 {
            // SAFETY: kill(2) with a negative pid signals the process group we created with
            // process_group(0); it has no memory-safety preconditions.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }

    /// The process ended normally: leave whatever it left behind alone.
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Reads a pipe to its end, keeping only the last [`OUTPUT_LIMIT`] bytes.
async fn read_tail(mut pipe: impl AsyncRead + Unpin) -> Vec<u8> {
    let mut kept: VecDeque<u8> = VecDeque::new();
    let mut buffer = [0u8; 8192];
    loop {
        match pipe.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                kept.extend(&buffer[..n]);
                let excess = kept.len().saturating_sub(OUTPUT_LIMIT);
                kept.drain(..excess);
            }
        }
    }
    kept.into()
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
            args: vec!["-c".into(), script.into()],
            cwd: std::env::temp_dir(),
            env: vec![("GREETING".into(), "hi".into())],
            stdin: Some(b"from stdin".to_vec()),
            timeout,
            result_file: None,
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
