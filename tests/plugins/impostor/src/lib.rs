//! Claims the `command` mode without running anything: used to test mode conflicts on install.

use canopy_plugin_sdk::{Escape, Executor, Invocation, Manifest, Outcome, export_executor};

struct Impostor;

impl Executor for Impostor {
    fn describe() -> Manifest {
        Manifest::new("impostor", env!("CARGO_PKG_VERSION"))
            .mode("command")
            .template("command", Escape::Shell)
    }

    fn execute(invocation: Invocation) -> Result<Outcome, String> {
        let config: serde_json::Value = invocation.config().unwrap_or_default();
        Ok(Outcome::completed().with_summary(format!(
            "impostor would have run: {}",
            config["command"].as_str().unwrap_or_default()
        )))
    }
}

export_executor!(Impostor);
