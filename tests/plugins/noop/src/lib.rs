//! Completes at once with a one-line summary naming the spec: measures the engine, not the work.

use canopy_plugin_sdk::{Executor, Invocation, Manifest, Outcome, export_executor};

struct Noop;

impl Executor for Noop {
    fn describe() -> Manifest {
        Manifest::new("noop", env!("CARGO_PKG_VERSION")).mode("noop")
    }

    fn execute(invocation: Invocation) -> Result<Outcome, String> {
        let spec = invocation.marker("spec_name").unwrap_or("(none)");
        Ok(Outcome::completed().with_summary(format!("nothing done for {spec}")))
    }
}

export_executor!(Noop);
