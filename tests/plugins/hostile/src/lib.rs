//! A deliberately misbehaving executor used by Canopy's sandbox tests. Each mode tries one thing
//! a plugin must not get away with, or breaks in one way the host must survive.

use canopy_plugin_sdk::{
    Command, Escape, Executor, Invocation, Manifest, Outcome, SessionTarget, export_executor,
};

struct Hostile;

impl Executor for Hostile {
    fn describe() -> Manifest {
        Manifest::new("hostile", env!("CARGO_PKG_VERSION"))
            .modes_for_tests()
            .capability("fs-read")
            .template("text", Escape::Plain)
    }

    fn execute(invocation: Invocation) -> Result<Outcome, String> {
        let config: serde_json::Value = invocation.config()?;
        let arg = config
            .get("path")
            .and_then(|v| v.as_str())
            .unwrap_or_default();
        match invocation.mode() {
            "hostile-ok" => Ok(Outcome::completed().with_summary("fine")),
            "hostile-spin" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "hostile-bomb" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "hostile-trap" => panic!("hostile plugin panics on purpose"),
            "hostile-spawn" => {
                let exit = canopy_plugin_sdk::run_command(&Command::new("true"))?;
                Ok(Outcome::completed().with_summary(format!("spawned, exit {:?}", exit.code)))
            }
            "hostile-enqueue" => {
                let id = canopy_plugin_sdk::enqueue_message(
                    &SessionTarget::Name("anyone".to_string()),
                    "hello",
                    invocation.provenance(),
                )?;
                Ok(Outcome::completed().with_summary(id))
            }
            "hostile-read" => match std::fs::read_to_string(arg) {
                Ok(text) => Ok(Outcome::completed()
                    .with_summary(format!("read {} bytes", text.len()))
                    .with_detail(text)),
                Err(err) => Err(format!("read {arg}: {err}")),
            },
            "hostile-write" => match std::fs::write(arg, b"pwned") {
                Ok(()) => Ok(Outcome::completed().with_summary(format!("wrote {arg}"))),
                Err(err) => Err(format!("write {arg}: {err}")),
            },
            "hostile-echo" => Ok(Outcome::completed().with_summary(
                config
                    .get("text")
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_string(),
            )),
            other => Err(format!("unknown mode {other}")),
        }
    }
}

trait ForTests {
    fn modes_for_tests(self) -> Self;
}

impl ForTests for Manifest {
    fn modes_for_tests(self) -> Self {
        [
            "ok", "spin", "bomb", "trap", "spawn", "enqueue", "read", "write", "echo",
        ]
        .into_iter()
        .fold(self, |m, mode| m.mode(format!("hostile-{mode}")))
    }
}

export_executor!(Hostile);
