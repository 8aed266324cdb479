//! An executor whose `describe` sleeps for a minute inside a WASI clock wait: installing it must
//! fail at the describe deadline without holding up other installs.

use canopy_plugin_sdk::{Executor, Invocation, Manifest, Outcome, export_executor};

struct SlowDescribe;

impl Executor for SlowDescribe {
    fn describe() -> Manifest {
        std::thread::sleep(std::time::Duration::from_secs(60));
        Manifest::new("slow-describe", env!("CARGO_PKG_VERSION")).mode("slow-describe")
    }

    fn execute(_invocation: Invocation) -> Result<Outcome, String> {
        Ok(Outcome::completed())
    }
}

export_executor!(SlowDescribe);
