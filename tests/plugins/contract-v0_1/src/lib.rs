//! An executor written against `canopy:hooks@0.1.0` directly (no SDK, which speaks the current
//! contract): the host must keep running plugins built before 0.2.0 unchanged.
//!
//! Mode `legacy`: completes with a summary naming what the 0.1.0 provenance says (graph, run,
//! event), and, when the config has a `command`, runs it through the host's `run-command`
//! (capability `process`) and puts its stdout in the detail. Exit code non-zero fails.

#[allow(clippy::all)]
mod bindings {
    wit_bindgen::generate!({
        path: "../../../wit/since_v0.1.0",
        world: "executor",
    });
}

use bindings::canopy::hooks::host;
use bindings::canopy::hooks::types::{
    Command, Escape, Invocation, Level, Manifest, Outcome, Status, TemplateField,
};
use bindings::exports::canopy::hooks::plugin::Guest;

struct Legacy;

/// The value of `"field": "..."` in a flat JSON object, without a JSON parser.
fn string_field(config: &str, field: &str) -> Option<String> {
    let key = format!("\"{field}\":\"");
    let start = config.find(&key)? + key.len();
    let rest = &config[start..];
    let end = rest.find('"')?;
    Some(rest[..end].to_string())
}

impl Guest for Legacy {
    fn describe() -> Manifest {
        Manifest {
            name: "legacy".to_string(),
            version: "0.1.0".to_string(),
            modes: vec!["legacy".to_string()],
            capabilities: vec!["process".to_string()],
            config_schema: "{\"type\":\"object\"}".to_string(),
            templates: vec![TemplateField {
                field: "command".to_string(),
                escape: Escape::Shell,
            }],
        }
    }

    fn validate(_mode: String, _config: String) -> Result<(), String> {
        Ok(())
    }

    fn execute(invocation: Invocation) -> Result<Outcome, String> {
        let p = &invocation.provenance;
        host::log(Level::Info, "legacy executor called");
        let summary = format!(
            "contract 0.1.0: graph={} run={} event={}",
            p.graph_name, p.run_id, p.event
        );
        let Some(line) = string_field(&invocation.config, "command") else {
            return Ok(Outcome {
                status: Status::Completed,
                summary: Some(summary),
                detail: String::new(),
                harness_session: None,
            });
        };
        let exit = host::run_command(&Command {
            program: "sh".to_string(),
            args: vec!["-c".to_string(), line],
            cwd: None,
            env: Vec::new(),
            stdin: None,
            timeout_ms: invocation.deadline_ms,
            capture_result: false,
        })?;
        let status = match exit.code {
            Some(0) => Status::Completed,
            code => Status::Failed(format!("exited with {code:?}: {}", exit.stderr.trim())),
        };
        Ok(Outcome {
            status,
            summary: Some(summary),
            detail: exit.stdout,
            harness_session: None,
        })
    }
}

bindings::export!(Legacy with_types_in bindings);
