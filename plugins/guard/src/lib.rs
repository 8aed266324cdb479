//! The built-in `guard` executor: the common policies for an agent's tool calls, without code.
//! It only decides (a sync hook: a runtime hook on `before_tool`, or a daemon hook on
//! `tool.pre_call`), needs no capability, and answers from its config and the call's input:
//!
//! - `deny`: rules `{ "tool": "Bash", "field": "command", "pattern": "rm -rf|git push --force",
//!   "reason": "..." }`; a call whose tool name the `tool` regex matches whole and whose input
//!   field the `pattern` regex finds is denied.
//! - `within`: paths of the workdir that file tools may write (`["src", "tests"]`); an `Edit`,
//!   `Write`, `MultiEdit` or `NotebookEdit` (or the tools `within_tools` names) whose
//!   `file_path` / `notebook_path` lies outside them is denied. The check is on the path as
//!   written, `..` resolved, not on the file system (a symlink in the workdir is not followed).
//! - `allow_commands`: the only commands `Bash` may run, as leading words (`"cargo test"`
//!   allows `cargo test --release`, not `cargo testx`); a command that chains others (`;`,
//!   `&&`, `|`, `$(`, a backquote, a redirection) is denied when an allow-list is set.
//!
//! Anything no rule denies is allowed.

use std::path::{Component, Path, PathBuf};

use canopy_plugin_sdk::{Config, Executor, Invocation, Manifest, Outcome, export_executor};
use regex::Regex;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

/// Config of the `guard` mode.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GuardConfig {
    /// tool calls to deny: a tool name regex (matched whole), an input field and a pattern found in it
    #[serde(default)]
    deny: Vec<DenyRule>,
    /// workdir paths file tools may write; a file tool's path outside them is denied
    #[serde(default)]
    within: Vec<String>,
    /// the file tools `within` applies to, a regex matched whole (default Edit|Write|MultiEdit|NotebookEdit)
    #[serde(default)]
    within_tools: Option<String>,
    /// the only commands Bash may run, as leading words (`cargo test`)
    #[serde(default)]
    allow_commands: Vec<String>,
}

/// One `deny` rule.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct DenyRule {
    /// tool name regex, matched whole (`Bash`, `Edit|Write`, `mcp__.*`)
    tool: String,
    /// the tool input's field the pattern is looked for in (default `command`)
    #[serde(default)]
    field: Option<String>,
    /// regex looked for in the field
    pattern: String,
    /// what the agent is told (default: which rule denied it)
    #[serde(default)]
    reason: Option<String>,
}

const FILE_TOOLS: &str = "Edit|Write|MultiEdit|NotebookEdit";

/// A config with its regexes compiled; the error names the field.
struct Guard {
    deny: Vec<(Regex, String, Regex, String)>,
    within: Vec<String>,
    within_tools: Regex,
    allow_commands: Vec<Vec<String>>,
}

fn whole(field: &str, pattern: &str) -> Result<Regex, String> {
    Regex::new(&format!("^(?:{pattern})$"))
        .map_err(|err| format!("field `{field}`: `{pattern}` is not a regex: {err}"))
}

impl Guard {
    fn compile(config: GuardConfig) -> Result<Self, String> {
        if config.deny.is_empty() && config.within.is_empty() && config.allow_commands.is_empty() {
            return Err(
                "a guard needs at least one of `deny`, `within` or `allow_commands`".to_string(),
            );
        }
        let mut deny = Vec::new();
        for (index, rule) in config.deny.into_iter().enumerate() {
            let tool = whole(&format!("deny.{index}.tool"), &rule.tool)?;
            let pattern = Regex::new(&rule.pattern).map_err(|err| {
                format!(
                    "field `deny.{index}.pattern`: `{}` is not a regex: {err}",
                    rule.pattern
                )
            })?;
            let field = rule.field.unwrap_or_else(|| "command".to_string());
            let reason = rule.reason.unwrap_or_else(|| {
                format!(
                    "{} `{field}` matches `{}`, which the guard denies",
                    rule.tool, rule.pattern
                )
            });
            deny.push((tool, field, pattern, reason));
        }
        for (index, path) in config.within.iter().enumerate() {
            if path.trim().is_empty() || Path::new(path).is_absolute() || path.contains("..") {
                return Err(format!(
                    "field `within.{index}`: `{path}` must be a path inside the workdir, relative to it (`src`, `docs/api`)"
                ));
            }
        }
        let within_tools = whole(
            "within_tools",
            config.within_tools.as_deref().unwrap_or(FILE_TOOLS),
        )?;
        let mut allow_commands = Vec::new();
        for (index, command) in config.allow_commands.iter().enumerate() {
            let words: Vec<String> = command.split_whitespace().map(str::to_string).collect();
            if words.is_empty() {
                return Err(format!("field `allow_commands.{index}` is empty"));
            }
            allow_commands.push(words);
        }
        Ok(Self {
            deny,
            within: config.within,
            within_tools,
            allow_commands,
        })
    }

    /// Why the call is denied, if it is.
    fn judge(&self, input: &Value, workdir: &str) -> Option<String> {
        let tool = input.get("tool_name").and_then(Value::as_str).unwrap_or("");
        let tool_input = input.get("tool_input").unwrap_or(&Value::Null);
        let text = |field: &str| tool_input.get(field).and_then(Value::as_str);
        for (tools, field, pattern, reason) in &self.deny {
            if tools.is_match(tool) && text(field).is_some_and(|value| pattern.is_match(value)) {
                return Some(reason.clone());
            }
        }
        if !self.within.is_empty()
            && self.within_tools.is_match(tool)
            && let Some(path) = text("file_path").or_else(|| text("notebook_path"))
        {
            let root = Path::new(workdir);
            let target = lexical(&root.join(path));
            if !self
                .within
                .iter()
                .any(|dir| target.starts_with(lexical(&root.join(dir))))
            {
                return Some(format!(
                    "{tool} of {path} is outside the paths this agent may write ({})",
                    self.within.join(", ")
                ));
            }
        }
        if !self.allow_commands.is_empty()
            && tool == "Bash"
            && let Some(command) = text("command")
        {
            if let Some(op) = ["\n", ";", "&", "|", "$(", "`", ">", "<"]
                .into_iter()
                .find(|op| command.contains(op))
            {
                return Some(format!(
                    "the command chains or redirects (`{}`); only the allowed commands run, one at a time: {}",
                    op.escape_default(),
                    self.allowed()
                ));
            }
            let words: Vec<&str> = command.split_whitespace().collect();
            let allowed = self.allow_commands.iter().any(|prefix| {
                words.len() >= prefix.len() && words.iter().zip(prefix).all(|(w, p)| w == p)
            });
            if !allowed {
                return Some(format!(
                    "`{command}` is not an allowed command ({})",
                    self.allowed()
                ));
            }
        }
        None
    }

    fn allowed(&self) -> String {
        self.allow_commands
            .iter()
            .map(|words| words.join(" "))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `path` with `.` and `..` resolved as written (never above the root).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

struct GuardExecutor;

impl Executor for GuardExecutor {
    fn describe() -> Manifest {
        Manifest::new("guard", env!("CARGO_PKG_VERSION"))
            .deciding_mode("guard")
            .config_schema_of::<GuardConfig>()
    }

    fn validate(_mode: &str, config: &Config) -> Result<(), String> {
        Guard::compile(config.parse()?).map(|_| ())
    }

    fn execute(invocation: Invocation) -> Result<Outcome, String> {
        let guard = Guard::compile(invocation.config()?)?;
        let Some(input) = invocation.decision_input() else {
            return Err("the guard mode only decides: use it as a sync hook (a runtime hook on before_tool, or a daemon hook on tool.pre_call with mode = \"sync\")".to_string());
        };
        let input: Value = serde_json::from_str(input)
            .map_err(|err| format!("the decision input is not JSON: {err}"))?;
        Ok(match guard.judge(&input, invocation.workdir()) {
            Some(reason) => Outcome::deny(reason),
            None => Outcome::allow(),
        })
    }
}

export_executor!(GuardExecutor);
