//! Running processes through the host (capability `process`).

use crate::{Exit, wit, wit_host};

/// A process to run with [`run_command`]: program, arguments, working directory, environment,
/// stdin and timeout.
#[derive(Debug, Clone)]
pub struct Command {
    inner: wit::Command,
    /// Made by [`Command::shell`] from a line it runs without `sh`.
    direct: bool,
}

impl Command {
    /// A command running `program` (looked up on the daemon's PATH when it has no slash) in the
    /// invocation's workdir, with a 60 s timeout.
    pub fn new(program: impl Into<String>) -> Self {
        Self {
            inner: wit::Command {
                program: program.into(),
                args: Vec::new(),
                cwd: None,
                env: Vec::new(),
                stdin: None,
                timeout_ms: 60_000,
                capture_result: false,
            },
            direct: false,
        }
    }

    /// A shell command line, run as `sh -c` would run it. A line that needs no shell runs
    /// directly, saving the shell's exec (about 0.7 ms): plain words (letters, digits,
    /// `-_./,:@+%=` and blanks), not starting with a shell builtin, keyword or assignment, in
    /// which the words after the first may hold single-quoted values (`'…'`, `\'`) as the host
    /// renders markers into such a line ([`canopy_shell_words::direct_words`]). Anything else
    /// runs under `sh -c`. See [`Command::is_direct`] for falling back to the shell when the
    /// direct run fails.
    pub fn shell(line: &str) -> Self {
        match canopy_shell_words::direct_words(line) {
            Some(words) => Self {
                direct: true,
                ..Self::new(words[0].clone()).args(words[1..].iter().cloned())
            },
            None => Self::new("sh").arg("-c").arg(line),
        }
    }

    /// The same program and arguments run by `sh` without the shell parsing any of them
    /// (`sh -c '"$0" "$@"' program args…`): how a direct line the host could not start is run
    /// after all, so its failure reads as the shell's (`sh: 1: deploy: not found`, exit 127)
    /// while every argument stays data.
    pub fn under_sh(&self) -> Self {
        let mut inner = self.inner.clone();
        inner.program = "sh".to_string();
        inner.args = [
            "-c".to_string(),
            r#""$0" "$@""#.to_string(),
            self.inner.program.clone(),
        ]
        .into_iter()
        .chain(self.inner.args.iter().cloned())
        .collect();
        Self {
            inner,
            direct: false,
        }
    }

    /// True when [`Command::shell`] chose to run the line directly, without `sh`.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Adds one argument.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.inner.args.push(arg.into());
        self
    }

    /// Adds several arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.inner.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets the working directory; it must be inside the invocation's workdir.
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.inner.cwd = Some(cwd.into());
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.inner.env.push((key.into(), value.into()));
        self
    }

    /// Writes these bytes to the process's stdin, then closes it.
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.inner.stdin = Some(bytes.into());
        self
    }

    /// Asks the host for a result file: the process finds its path in `CANOPY_RESULT_FILE` and
    /// what it writes there comes back in [`Exit::result`].
    pub fn capture_result(mut self) -> Self {
        self.inner.capture_result = true;
        self
    }

    /// Kills the process group after this many milliseconds (the host caps it at the call's
    /// deadline).
    pub fn timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.inner.timeout_ms = timeout_ms;
        self
    }
}

/// The words of a line of plain words that needs no shell to run, or `None`.
pub use canopy_shell_words::plain_words;

/// Runs a process and waits for it. `Err` when the host refused (missing `process` capability,
/// cwd outside the workdir) or the spawn failed; a process that ran and failed is an `Ok(Exit)`
/// with a non-zero code.
pub fn run_command(command: &Command) -> Result<Exit, String> {
    wit_host::run_command(&command.inner).map(Exit::from)
}

impl Exit {
    /// True when the process exited with code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_lines_run_without_sh_and_anything_shell_runs_under_sh() {
        assert!(Command::shell("/bin/true").is_direct());
        assert!(!Command::shell("true").is_direct());
        assert!(!Command::shell("a | b").is_direct());
        assert!(!Command::new("/bin/true").is_direct());
        let tagged = Command::shell("git tag -m 'it'\\''s $(id)' v1");
        assert!(tagged.is_direct());
        assert_eq!(tagged.inner.program, "git");
        assert_eq!(tagged.inner.args, ["tag", "-m", "it's $(id)", "v1"]);
        let fallback = tagged.under_sh();
        assert!(!fallback.is_direct());
        assert_eq!(fallback.inner.program, "sh");
        assert_eq!(
            fallback.inner.args,
            [
                "-c",
                "\"$0\" \"$@\"",
                "git",
                "tag",
                "-m",
                "it's $(id)",
                "v1"
            ]
        );
    }
}
