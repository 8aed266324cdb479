//! A deliberately misbehaving executor used by Canopy's sandbox tests. Each mode tries one thing
//! a plugin must not get away with, or breaks in one way the host must survive.
//!
//! Arguments come from the config: `path`, `secs`, `count`, `bytes`, `addr`, `link`, `target`.
//!
//! `hostile-config` shows what the host handed over: `validate` refuses a config with `"refuse":
//! true`, naming every key it received; `execute` returns the config it received as its detail
//! and its deadline (milliseconds) as its summary.

use std::io::{Read, Write};
use std::time::Duration;

use canopy_plugin_sdk::{
    Command, Config, Escape, Executor, GraphRef, Invocation, Manifest, Origin, Outcome, Provenance,
    SessionTarget, export_executor, log,
};

struct Hostile;

fn u64_field(config: &serde_json::Value, field: &str, default: u64) -> u64 {
    config
        .get(field)
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(default)
}

fn str_field<'a>(config: &'a serde_json::Value, field: &str) -> &'a str {
    config
        .get(field)
        .and_then(|v| v.as_str())
        .unwrap_or_default()
}

impl Executor for Hostile {
    fn describe() -> Manifest {
        Manifest::new("hostile", env!("CARGO_PKG_VERSION"))
            .modes_for_tests()
            .capability("fs-read")
            .template("text", Escape::Plain)
    }

    fn validate(mode: &str, config: &Config) -> Result<(), String> {
        // `hostile-sleep` with `validate_secs` sleeps inside `validate` (a WASI clock wait).
        if mode == "hostile-sleep" {
            let secs = u64_field(config.as_json(), "validate_secs", 0);
            std::thread::sleep(Duration::from_secs(secs));
        }
        if mode == "hostile-config" && config.get("refuse") == Some(&serde_json::Value::Bool(true))
        {
            let keys: Vec<&str> = config
                .as_json()
                .as_object()
                .map(|object| object.keys().map(String::as_str).collect())
                .unwrap_or_default();
            return Err(format!("validate received keys: {}", keys.join(", ")));
        }
        Ok(())
    }

    fn execute(invocation: Invocation) -> Result<Outcome, String> {
        let config: serde_json::Value = invocation.config()?;
        let arg = str_field(&config, "path");
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
            // Runs `program args...` and hands back its stdout (e.g. `env`).
            "hostile-exec" => {
                let program = str_field(&config, "program");
                let args: Vec<String> = config
                    .get("args")
                    .and_then(|v| v.as_array())
                    .map(|a| {
                        a.iter()
                            .filter_map(|s| s.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                let exit = canopy_plugin_sdk::run_command(
                    &Command::new(program).args(args).timeout_ms(u64_field(
                        &config,
                        "timeout_ms",
                        60_000,
                    )),
                )?;
                Ok(Outcome::completed()
                    .with_summary(format!("exit {:?}", exit.code))
                    .with_detail(exit.stdout))
            }
            "hostile-enqueue" => {
                let id = canopy_plugin_sdk::enqueue_message(
                    &SessionTarget::Name(
                        config
                            .get("session")
                            .and_then(|v| v.as_str())
                            .unwrap_or("anyone")
                            .to_string(),
                    ),
                    "hello",
                    &invocation.provenance(),
                )?;
                Ok(Outcome::completed().with_summary(id))
            }
            // Claims to be another graph's run when it queues a message.
            "hostile-forge" => {
                let forged = Provenance {
                    origin: Origin::Cron("payroll".to_string()),
                    graph: Some(GraphRef {
                        id: "payroll".to_string(),
                        name: "payroll".to_string(),
                    }),
                    run_id: Some("forged-run".to_string()),
                    event: "on_completed".to_string(),
                    hook_index: Some(7),
                    spec_id: Some("forged-spec".to_string()),
                };
                let id = canopy_plugin_sdk::enqueue_message(
                    &SessionTarget::Name(str_field(&config, "session").to_string()),
                    "forged hello",
                    &forged,
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
            "hostile-config" => Ok(Outcome::completed()
                .with_summary(invocation.deadline_ms().to_string())
                .with_detail(invocation.config_json())),
            // Sleeps inside a host call (a WASI clock wait), past any deadline it was given.
            "hostile-sleep" => {
                std::thread::sleep(Duration::from_secs(u64_field(&config, "secs", 30)));
                Ok(Outcome::completed().with_summary("woke up"))
            }
            // Plants a symlink `link` -> `target` (the target is taken as written).
            "hostile-symlink" => {
                let link = str_field(&config, "link");
                let target = str_field(&config, "target");
                // std has no stable symlink on WASI: call `symlink-at` on the preopen that
                // holds `link`.
                let dirs = wasip2::filesystem::preopens::get_directories();
                let (dir, relative) = dirs
                    .iter()
                    .filter_map(|(dir, root)| {
                        link.strip_prefix(root.as_str())
                            .map(|rest| (dir, rest.trim_start_matches('/')))
                    })
                    .max_by_key(|(_, rest)| std::cmp::Reverse(rest.len()))
                    .ok_or_else(|| format!("symlink {link}: no preopen holds it"))?;
                match dir.symlink_at(target, relative) {
                    Ok(()) => Ok(Outcome::completed().with_summary(format!("linked {link}"))),
                    Err(err) => Err(format!("symlink {link}: {err}")),
                }
            }
            // Opens `path` again and again, holding every handle, until the host says no.
            "hostile-open-files" => {
                let limit = u64_field(&config, "count", 1_000_000);
                let mut held = Vec::new();
                let error = loop {
                    if held.len() as u64 >= limit {
                        break None;
                    }
                    match std::fs::File::open(arg) {
                        Ok(file) => held.push(file),
                        Err(err) => break Some(err.to_string()),
                    }
                };
                let summary = format!("opened {} files", held.len());
                match error {
                    Some(err) => Err(format!("{summary}, then: {err}")),
                    None => Ok(Outcome::completed().with_summary(summary)),
                }
            }
            // Returns a detail (and summary) of `bytes` bytes.
            "hostile-big" => {
                let bytes = usize::try_from(u64_field(&config, "bytes", 50 << 20)).unwrap_or(0);
                Ok(Outcome::completed()
                    .with_summary("s".repeat(bytes))
                    .with_detail("d".repeat(bytes)))
            }
            // Sends `count` log lines of `bytes` bytes, then one that tries to forge a log line.
            "hostile-log" => {
                let line =
                    "x".repeat(usize::try_from(u64_field(&config, "bytes", 1 << 20)).unwrap_or(0));
                for _ in 0..u64_field(&config, "count", 20) {
                    log::info(&line);
                }
                log::info(
                    "innocent\n2026-01-01T00:00:00Z  INFO canopy_daemon::daemon: canopy daemon listening url=http://evil.example\x1b[2K\x1b[1A",
                );
                Ok(Outcome::completed().with_summary("logged"))
            }
            // Connects to `addr` over TCP, sends a line, returns what comes back.
            "hostile-connect" => {
                let addr = str_field(&config, "addr");
                let mut stream = std::net::TcpStream::connect(addr)
                    .map_err(|err| format!("connect {addr}: {err}"))?;
                stream
                    .write_all(b"ping\n")
                    .map_err(|err| format!("write {addr}: {err}"))?;
                let mut answer = String::new();
                stream
                    .read_to_string(&mut answer)
                    .map_err(|err| format!("read {addr}: {err}"))?;
                Ok(Outcome::completed().with_summary(answer.trim().to_string()))
            }
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
            "ok",
            "spin",
            "bomb",
            "trap",
            "spawn",
            "exec",
            "enqueue",
            "forge",
            "read",
            "write",
            "echo",
            "config",
            "sleep",
            "symlink",
            "open-files",
            "big",
            "log",
            "connect",
        ]
        .into_iter()
        .fold(self, |m, mode| m.mode(format!("hostile-{mode}")))
    }
}

export_executor!(Hostile);
