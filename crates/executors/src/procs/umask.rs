//! The umask of what the daemon runs for the user. The daemon itself runs with 077 (everything
//! it creates in the data dir is private, see [`private_umask`]); the processes it starts in a
//! user's workdir get the umask the user started it with back.

use std::path::{Path, PathBuf};

/// The umask the process had before [`private_umask`].
static USER_UMASK: std::sync::OnceLock<libc::mode_t> = std::sync::OnceLock::new();

/// The umask the user started the daemon with (the daemon itself runs with 077 so that
/// everything it creates in the data dir is private): what processes it runs for the user in
/// their workdirs should get back.
pub fn user_umask() -> Option<libc::mode_t> {
    USER_UMASK.get().copied()
}

/// A command running `program` with `args` (`program`: a path, or a name looked up on `path_var`,
/// the `PATH` the child will have) with the user's umask rather than the daemon's 077, so that
/// what it creates in the user's workdir is as the user would have it.
///
/// Spawn it with [`super::spawner::spawn`]: its thread has the user's umask, so the
/// command is plain. Only where that thread cannot run is the umask set by the command itself.
/// The daemon's address space is large (wasmtime reserves memory for its instances), and a
/// `fork` copies its page tables: milliseconds per process. So the umask is not set between
/// fork and exec (a `pre_exec` closure forces a fork), and the standard library starts the
/// child with `posix_spawn`: a shell run with `-c SCRIPT` gets `umask M;` at the head of its
/// script (the same line, so its line numbers do not move); any other program is run through
/// `/bin/sh -c 'umask M && exec "$0" "$@"'`. Only a program that must keep another `argv[0]`
/// (`arg0`) still goes through a fork. Outside the daemon the command is plain.
pub fn user_command(
    program: &str,
    arg0: Option<&str>,
    args: &[String],
    path_var: Option<&std::ffi::OsString>,
) -> tokio::process::Command {
    let resolved = if super::env::is_path(program) {
        PathBuf::from(program)
    } else {
        super::env::which(program, path_var).unwrap_or_else(|| PathBuf::from(program))
    };
    // A program that is not there fails to spawn, as it would without a wrapper.
    let found = resolved.is_file();
    let plain = |resolved: &Path| {
        let mut command = tokio::process::Command::new(resolved);
        if let Some(arg0) = arg0 {
            command.arg0(arg0);
        }
        command.args(args);
        command
    };
    // Started by the spawner, it gets the user's umask with no wrapper (see `procs::spawner`).
    let Some(mask) = user_umask().filter(|_| found && !super::spawner::available()) else {
        return plain(&resolved);
    };
    let set_umask = format!("umask {mask:04o}");
    let shell = matches!(
        resolved.file_name().and_then(|n| n.to_str()),
        Some("sh" | "bash" | "dash")
    );
    match (arg0, args) {
        (None, [dash_c, script, rest @ ..]) if shell && dash_c == "-c" => {
            let mut command = tokio::process::Command::new(&resolved);
            command
                .arg("-c")
                .arg(format!("{set_umask}; {script}"))
                .args(rest);
            command
        }
        (None, _) => {
            let mut command = tokio::process::Command::new("/bin/sh");
            command
                .arg("-c")
                .arg(format!("{set_umask} && exec \"$0\" \"$@\""))
                .arg(&resolved)
                .args(args);
            command
        }
        (Some(_), _) => {
            let mut command = plain(&resolved);
            // SAFETY: the closure runs in the child between fork and exec and only calls
            // umask(2), which is async-signal-safe and cannot fail.
            unsafe {
                command.pre_exec(move || {
                    libc::umask(mask);
                    Ok(())
                });
            }
            command
        }
    }
}

/// Makes every file and folder this process creates from now on private to its user (0600 /
/// 0700): the daemon calls it first, for the database, the token, plugins, the cache, scratch
/// files.
pub fn private_umask() {
    // SAFETY: umask(2) only sets this process's file-mode creation mask and cannot fail; it is
    // process-wide, which is the point: no thread of the daemon creates group- or
    // world-readable files after this.
    let previous = unsafe { libc::umask(0o077) };
    let _ = USER_UMASK.set(previous);
}
