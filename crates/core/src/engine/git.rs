//! The dirty-tree guard's view of a workdir: `git status --porcelain`.

use std::path::Path;
use std::time::Duration;

/// Paths listed in a dirty-tree blocker.
pub const LISTED_PATHS: usize = 20;

/// What `git status` said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreeState {
    Clean,
    /// The porcelain lines (`XY path`), all of them.
    Dirty(Vec<String>),
    /// Not a git work tree (or git failed): nothing to guard.
    NotARepo(String),
}

/// Runs `git status --porcelain` in `workdir`, with a timeout.
pub async fn tree_state(workdir: &Path) -> TreeState {
    // `git status` may rewrite the repository's index: with the user's umask, not the daemon's.
    let args: Vec<String> = ["status", "--porcelain", "--untracked-files=all"]
        .map(String::from)
        .to_vec();
    let mut command = canopy_executors::procs::umask::user_command(
        "git",
        None,
        &args,
        std::env::var_os("PATH").as_ref(),
    );
    command
        .current_dir(workdir)
        .kill_on_drop(true)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let status = async {
        canopy_executors::procs::spawner::spawn(command)
            .await?
            .wait_with_output()
            .await
    };
    match tokio::time::timeout(Duration::from_secs(30), status).await {
        Ok(Ok(output)) if output.status.success() => {
            let lines: Vec<String> = String::from_utf8_lossy(&output.stdout)
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_string)
                .collect();
            if lines.is_empty() {
                TreeState::Clean
            } else {
                TreeState::Dirty(lines)
            }
        }
        Ok(Ok(output)) => {
            TreeState::NotARepo(String::from_utf8_lossy(&output.stderr).trim().to_string())
        }
        Ok(Err(err)) => TreeState::NotARepo(format!("cannot run git: {err}")),
        Err(_) => TreeState::NotARepo("git status timed out after 30 s".to_string()),
    }
}
