//! Completes at once with a one-line summary naming the spec: measures the engine, not the work.
//!
//! As a sync hook it allows, or, when its config has a `patch` object, answers with that patch:
//! the engine benchmark's no-op decision.

use canopy_plugin_sdk::{Executor, Invocation, Manifest, Outcome, export_executor};

struct Noop;

impl Executor for Noop {
    fn describe() -> Manifest {
        Manifest::new("noop", env!("CARGO_PKG_VERSION")).deciding_mode("noop")
    }

    fn execute(invocation: Invocation) -> Result<Outcome, String> {
        if invocation.decision_input().is_some() {
            let config: serde_json::Value = invocation.config()?;
            return Ok(match config.get("patch") {
                Some(patch) => Outcome::patch(patch.clone()),
                None => Outcome::allow(),
            });
        }
        let spec = invocation.marker("spec_name").unwrap_or("(none)");
        Ok(Outcome::completed().with_summary(format!("nothing done for {spec}")))
    }
}

export_executor!(Noop);
