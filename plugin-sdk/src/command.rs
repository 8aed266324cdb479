//! Running processes through the host (capability `process`).

use crate::{Exit, wit, wit_host};

/// A process to run with [`run_command`]: program, arguments, working directory, environment,
/// stdin and timeout.
#[derive(Debug, Clone)]
pub struct Command {
    inner: wit::Command,
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
        }
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

/// Runs a process and waits for it. `Err` when the host refused (missing `process` capability,
/// cwd outside the workdir) or the spawn failed; a process that ran and failed is an `Ok(Exit)`
/// with a non-zero code.
pub fn run_command(command: &Command) -> Result<Exit, String> {
    wit_host::run_command(&command.inner)
}

impl Exit {
    /// True when the process exited with code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}
