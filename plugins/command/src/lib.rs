//! The built-in `command` executor: runs a shell command in the workdir. A command of plain
//! words (`/bin/true`, `cargo test --release`) runs directly, as the shell would run it, without
//! the shell's own exec; any other runs under `sh -c`.
//!
//! The `command` field is a template with shell escaping: the host renders a marker into a line
//! that needs no shell as a single-quoted value, which [`Command::shell`] splits back out as
//! part of one argument, and into any other line as a reference to a `CANOPY_MARKER_<NAME>`
//! variable the host sets. No value is ever parsed by a shell. Every marker of at most 64 KiB is
//! also exported to the process as `CANOPY_HOOK_<MARKER>` (`CANOPY_HOOK_WORKDIR`,
//! `CANOPY_HOOK_SPEC_NAME`, ...); a longer one would keep the process from starting.
//!
//! The command is killed at the call's deadline, which the host derives from the config's
//! `timeout_seconds` / `timeout_minutes` (reserved keys: this plugin never sees them).
//!
//! The outcome follows Canopy's result protocol ([`Outcome::from_exit`]): exit code 0 is
//! completed, anything else failed with the code and the tail of stderr, and the process may say
//! more through the JSON file named by `CANOPY_RESULT_FILE`.
//!
//! As a sync hook the command decides ([`Outcome::decision_from_exit`]): the action's input
//! arrives as JSON on stdin (and in `CANOPY_HOOK_DATA`); exit 0 allows, exit 2 denies with
//! stderr as the reason, and a decision object on stdout says it explicitly.

use canopy_plugin_sdk::{
    Command, Config, Escape, Executor, Invocation, Manifest, Outcome, export_executor,
};
use schemars::JsonSchema;
use serde::Deserialize;

/// Longest marker value exported as a `CANOPY_HOOK_<MARKER>` variable, in bytes.
const ENV_MARKER_LIMIT: usize = 64 * 1024;

/// Config of the `command` mode.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CommandConfig {
    /// shell command, run as sh -c runs it, in the workdir; a marker's value is never parsed by the shell
    command: String,
}

struct CommandExecutor;

impl Executor for CommandExecutor {
    fn describe() -> Manifest {
        Manifest::new("command", env!("CARGO_PKG_VERSION"))
            .deciding_mode("command")
            .capability("process")
            .template("command", Escape::Shell)
            .config_schema_of::<CommandConfig>()
    }

    fn validate(_mode: &str, config: &Config) -> Result<(), String> {
        let config: CommandConfig = config.parse()?;
        if config.command.trim().is_empty() {
            return Err("field `command` must not be empty".to_string());
        }
        Ok(())
    }

    fn execute(invocation: Invocation) -> Result<Outcome, String> {
        let config: CommandConfig = invocation.config()?;
        // A little before the call's deadline, so the command is reported as timed out.
        let timeout_ms = invocation.deadline_ms().saturating_sub(50).max(1);

        let decides = invocation.decision_input();
        let prepare = |mut command: Command| {
            command = command.cwd(invocation.workdir()).timeout_ms(timeout_ms);
            command = match decides {
                // A sync hook reads the action's input on stdin and answers by its exit code
                // or a decision object on stdout.
                Some(input) => command.stdin(input.as_bytes().to_vec()),
                None => command.capture_result(),
            };
            for (name, value) in invocation.markers() {
                // Linux refuses to start a process with one environment string over 128 KiB:
                // a marker that long (an event's `data` holding a large body, escaped) would
                // fail the command before it ran. It is left out; a sync hook has its whole
                // input on stdin.
                if value.len() > ENV_MARKER_LIMIT {
                    continue;
                }
                command = command.env(format!("CANOPY_HOOK_{}", name.to_ascii_uppercase()), value);
            }
            command
        };
        // A line that needs no shell runs directly (one exec, not two), its quoted values split
        // out as single arguments. A direct run the host could not start (no such program)
        // runs under `sh` after all, its words passed as arguments the shell never parses, so
        // the error is the shell's own (`sh: 1: deploy: not found`, exit 127).
        let command = prepare(Command::shell(&config.command));
        let exit = match canopy_plugin_sdk::run_command(&command) {
            Err(_) if command.is_direct() => canopy_plugin_sdk::run_command(&command.under_sh())?,
            ran => ran?,
        };
        match decides {
            Some(_) => Outcome::decision_from_exit(&exit),
            None => Outcome::from_exit(&exit),
        }
    }
}

export_executor!(CommandExecutor);
