//! Launching an agent CLI (`claude`, `codex`, or any platform the daemon's `canopy.toml` names)
//! and reading what it reports. Needs the `process` capability.

use crate::{AgentPlatform, Command, Exit, Outcome, agent_platform, run_command};

/// One agent launch: which platform, the prompt, and the optional knobs.
#[derive(Debug, Clone, Default)]
pub struct AgentRequest {
    /// Platform name, looked up in the daemon's configuration.
    pub platform: String,
    /// The prompt, already rendered.
    pub prompt: String,
    /// Model to ask for, if any (uses the platform's model fragment).
    pub model: Option<String>,
    /// Effort to ask for, if any (uses the platform's effort fragment).
    pub effort: Option<String>,
    /// Harness session to resume, if any (uses the platform's resume fragment).
    pub resume: Option<String>,
    /// Directory the agent runs in.
    pub cwd: String,
    /// Kill the agent after this many milliseconds.
    pub timeout_ms: u64,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
}

/// How an agent launch went.
#[derive(Debug, Clone)]
pub struct AgentRun {
    /// The process's exit.
    pub exit: Exit,
    /// The argv that was run (the prompt included).
    pub argv: Vec<String>,
    /// The session / conversation id the agent printed, if any.
    pub session: Option<String>,
    /// The agent's final answer, when its output is JSON with a `result` field.
    pub result: Option<String>,
}

impl AgentRun {
    /// The outcome under the result protocol, with the agent's session and answer folded in.
    pub fn outcome(&self) -> Result<Outcome, String> {
        let mut outcome = Outcome::from_exit(&self.exit)?;
        if let Some(result) = &self.result {
            outcome = outcome.with_summary(result.clone());
        }
        if let Some(session) = &self.session {
            outcome = outcome.with_harness_session(session.clone());
        }
        Ok(outcome)
    }
}

/// Launches the agent and waits for it.
pub fn run_agent(request: &AgentRequest) -> Result<AgentRun, String> {
    let platform = agent_platform(&request.platform)?;
    let argv = agent_argv(&platform, request);
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| format!("agent platform `{}` has an empty command", request.platform))?;
    let mut command = Command::new(program.as_str())
        .args(args.iter().cloned())
        .cwd(request.cwd.as_str())
        .timeout_ms(request.timeout_ms)
        .capture_result();
    for (key, value) in &request.env {
        command = command.env(key.as_str(), value.as_str());
    }
    let exit = run_command(&command)?;
    let (session, result) = scan_output(&exit.stdout);
    Ok(AgentRun {
        exit,
        argv,
        session,
        result,
    })
}

/// The argv for a request: the platform's command with `{prompt}` replaced and the model,
/// effort and resume fragments spliced in at their placeholders (or appended).
pub fn agent_argv(platform: &AgentPlatform, request: &AgentRequest) -> Vec<String> {
    let fragment = |template: &[String], key: &str, value: Option<&str>| -> Vec<String> {
        match value {
            Some(value) if !template.is_empty() => template
                .iter()
                .map(|part| part.replace(key, value))
                .collect(),
            _ => Vec::new(),
        }
    };
    let fragments = [
        (
            "{resume_args}",
            fragment(
                &platform.resume_args,
                "{session}",
                request.resume.as_deref(),
            ),
        ),
        (
            "{model_args}",
            fragment(&platform.model_args, "{model}", request.model.as_deref()),
        ),
        (
            "{effort_args}",
            fragment(&platform.effort_args, "{effort}", request.effort.as_deref()),
        ),
    ];
    let mut argv = Vec::new();
    let mut placed = [false; 3];
    for part in &platform.command {
        if let Some(index) = fragments.iter().position(|(name, _)| part == name) {
            argv.extend(fragments[index].1.iter().cloned());
            placed[index] = true;
        } else {
            argv.push(part.replace("{prompt}", &request.prompt));
        }
    }
    for (index, (_, values)) in fragments.iter().enumerate() {
        if !placed[index] {
            argv.extend(values.iter().cloned());
        }
    }
    argv
}

/// Keys under which agent CLIs print their session / conversation id.
const SESSION_KEYS: [&str; 5] = [
    "session_id",
    "sessionId",
    "thread_id",
    "conversation_id",
    "conversationId",
];

/// Finds a session id and a final `result` in the agent's stdout: either one JSON document or
/// JSON lines (the last value seen wins).
pub fn scan_output(stdout: &str) -> (Option<String>, Option<String>) {
    let mut session = None;
    let mut result = None;
    let mut visit = |value: &serde_json::Value| {
        for key in SESSION_KEYS {
            if let Some(id) = value.get(key).and_then(serde_json::Value::as_str) {
                session = Some(id.to_string());
            }
        }
        if let Some(text) = value.get("result").and_then(serde_json::Value::as_str) {
            result = Some(text.to_string());
        }
    };
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(stdout.trim()) {
        match &value {
            serde_json::Value::Array(items) => items.iter().for_each(&mut visit),
            other => visit(other),
        }
    } else {
        for line in stdout.lines() {
            if let Ok(value) = serde_json::from_str::<serde_json::Value>(line.trim()) {
                visit(&value);
            }
        }
    }
    (session, result)
}
