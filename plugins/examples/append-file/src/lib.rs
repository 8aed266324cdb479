//! An example executor written with the Canopy SDK (not built into Canopy): the `append-file`
//! mode appends the rendered markers of each call to a file in the workdir.
//!
//! ```json
//! { "mode": "append-file", "file": "hook-log.txt", "line": "{{graph_name}} finished {{spec_name}}" }
//! ```
//!
//! With `line` set, that one rendered line is appended; without it, one `name=value` line per
//! marker. It needs `fs-write:.` (read-write access to the workdir) and nothing else.

use canopy_plugin_sdk::{Config, Escape, Executor, Invocation, Manifest, Outcome, export_executor};
use schemars::JsonSchema;
use serde::Deserialize;

fn default_file() -> String {
    "canopy-markers.log".to_string()
}

/// Config of the `append-file` mode.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AppendConfig {
    /// File to append to, relative to the workdir.
    #[serde(default = "default_file")]
    file: String,
    /// A template line; markers are rendered by the host.
    #[serde(default)]
    line: Option<String>,
}

struct AppendFile;

impl Executor for AppendFile {
    fn describe() -> Manifest {
        Manifest::new("append-file", env!("CARGO_PKG_VERSION"))
            .mode("append-file")
            .capability("fs-write:.")
            .template("line", Escape::Plain)
            .config_schema_of::<AppendConfig>()
    }

    fn validate(_mode: &str, config: &Config) -> Result<(), String> {
        let config: AppendConfig = config.parse()?;
        if config.file.is_empty()
            || config.file.starts_with('/')
            || config.file.split('/').any(|part| part == "..")
        {
            return Err(format!(
                "field `file` must be a relative path inside the workdir, got `{}`",
                config.file
            ));
        }
        Ok(())
    }

    fn execute(invocation: Invocation) -> Result<Outcome, String> {
        let config: AppendConfig = invocation.config()?;
        let text = match &config.line {
            Some(line) => format!("{line}\n"),
            None => invocation
                .markers()
                .map(|(name, value)| format!("{name}={value}\n"))
                .collect(),
        };
        let path = format!("{}/{}", invocation.workdir(), config.file);
        canopy_plugin_sdk::fs::append(&path, text.as_bytes())?;
        Ok(Outcome::completed().with_summary(format!(
            "appended {} bytes to {}",
            text.len(),
            config.file
        )))
    }
}

export_executor!(AppendFile);
