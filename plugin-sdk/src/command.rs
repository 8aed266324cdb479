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

    /// A shell command line, run as `sh -c` would run it. A line of plain words (letters, digits,
    /// `-_./,:@+%=` and blanks: no quoting, expansion, redirection or operator, and not a shell
    /// builtin or keyword) runs directly, with those words as program and arguments, saving
    /// the shell's exec (about 0.7 ms); anything else runs under `sh -c`. See
    /// [`Command::is_direct`] for falling back to the shell when the direct run fails.
    pub fn shell(line: &str) -> Self {
        match plain_words(line) {
            Some(words) => Self {
                direct: true,
                ..Self::new(words[0]).args(words[1..].iter().copied())
            },
            None => Self::new("sh").arg("-c").arg(line),
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

/// Shell builtins and keywords: a line starting with one means what the shell makes of it (some
/// have a program of the same name that behaves differently, such as `echo`).
const SHELL_WORDS: &[&str] = &[
    ".", ":", "[", "[[", "alias", "bg", "break", "case", "cd", "command", "continue", "do", "done",
    "echo", "elif", "else", "esac", "eval", "exec", "exit", "export", "false", "fc", "fg", "fi",
    "for", "function", "getopts", "hash", "if", "in", "jobs", "kill", "local", "printf", "pwd",
    "read", "readonly", "return", "select", "set", "shift", "source", "test", "then", "time",
    "times", "trap", "true", "type", "ulimit", "umask", "unalias", "unset", "until", "wait",
    "while",
];

/// The words of a shell command line that needs no shell to run (see [`Command::shell`]),
/// or `None`.
pub fn plain_words(line: &str) -> Option<Vec<&str>> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./,:@+%=".contains(c);
    if !line.chars().all(|c| plain(c) || c == ' ' || c == '\t') {
        return None;
    }
    let words: Vec<&str> = line.split([' ', '\t']).filter(|w| !w.is_empty()).collect();
    let first = *words.first()?;
    // `NAME=value cmd` is an assignment; a builtin or keyword is the shell's.
    if first.contains('=') || SHELL_WORDS.contains(&first) {
        return None;
    }
    Some(words)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_words_run_directly_and_anything_shell_runs_under_sh() {
        assert_eq!(plain_words("/bin/true"), Some(vec!["/bin/true"]));
        assert_eq!(
            plain_words("  cargo test --release -p web=1  "),
            Some(vec!["cargo", "test", "--release", "-p", "web=1"])
        );
        for line in [
            "",
            "   ",
            "echo hi",
            "true",
            "exit 3",
            "cd src",
            "FOO=1 make",
            "ls *.rs",
            "ls ~",
            "echo $HOME",
            "a | b",
            "a && b",
            "a; b",
            "a > out",
            "sleep 30 &",
            "git commit -m 'x y'",
            "printf \"%s\" x",
            "a\\ b",
            "a\nb",
            "cmd # note",
            "$(cmd)",
            "`cmd`",
            "ls [ab]",
            "ls {a,b}",
            "! cmd",
            "echo é",
        ] {
            assert_eq!(plain_words(line), None, "{line:?}");
        }
        assert!(Command::shell("/bin/true").is_direct());
        assert!(!Command::shell("true").is_direct());
        assert!(!Command::shell("a | b").is_direct());
        assert!(!Command::new("/bin/true").is_direct());
    }
}
