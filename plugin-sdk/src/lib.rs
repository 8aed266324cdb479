//! Write a Canopy executor.
//!
//! An executor is a WebAssembly component (WASI preview 2) that carries out one or more *modes*:
//! a graph node or a hook that names the mode is an `execute` call into the executor. Canopy runs
//! it sandboxed, with a fresh instance per call, a memory cap and a deadline. Before the call the
//! host has already rendered every `{{marker}}` in the config fields your manifest declares as
//! templates, so your code only ever sees final values.
//!
//! You write a struct, implement [`Executor`] for it and export it with [`export_executor!`]:
//!
//! ```
//! use canopy_plugin_sdk::{export_executor, Escape, Executor, Invocation, Manifest, Outcome};
//! use serde::Deserialize;
//!
//! /// Config of the `greet` mode.
//! #[derive(Deserialize)]
//! struct GreetConfig {
//!     /// Rendered by the host: `"{{spec_name}} shipped"` arrives as `"Login shipped"`.
//!     message: String,
//! }
//!
//! struct Greeter;
//!
//! impl Executor for Greeter {
//!     fn describe() -> Manifest {
//!         Manifest::new("greeter", env!("CARGO_PKG_VERSION"))
//!             .mode("greet")
//!             .template("message", Escape::Plain)
//!             .config_schema(serde_json::json!({
//!                 "type": "object",
//!                 "required": ["message"],
//!                 "properties": { "message": { "type": "string" } }
//!             }))
//!     }
//!
//!     fn execute(invocation: Invocation) -> Result<Outcome, String> {
//!         let config: GreetConfig = invocation.config()?;
//!         let graph = invocation.marker("graph_name").unwrap_or("(none)");
//!         canopy_plugin_sdk::log::info(&format!("greeting for graph {graph}"));
//!         Ok(Outcome::completed()
//!             .with_summary(format!("said: {}", config.message))
//!             .with_detail(config.message))
//!     }
//! }
//!
//! export_executor!(Greeter);
//! ```
//!
//! The config your code receives never holds Canopy's own keys (`mode`, `spec_ids`,
//! `timeout_seconds`, `timeout_minutes`, `detach`): the host reads them and takes them out first,
//! so a strict parser (`#[serde(deny_unknown_fields)]`) does not have to allow them. The deadline
//! they set arrives as [`Invocation::deadline_ms`].
//!
//! Build it with `cargo build --target wasm32-wasip2 --release` (crate type `cdylib`) and install
//! the `.wasm` with `canopy plugin install target/wasm32-wasip2/release/greeter.wasm`.
//!
//! # What a plugin may do
//!
//! Nothing outside its own memory, by default. The manifest lists the capabilities it needs
//! (`process`, `sessions`, `fs-read`, `fs-write:<subpath>`, `network`); the operator grants them at
//! install, and every host call ([`run_command`], [`enqueue_message`]) and every preopened
//! directory is checked against the grant. A call without its grant returns an error naming the
//! missing capability.

#![warn(missing_docs)]

extern crate self as canopy_plugin_sdk;

pub mod agent;
mod command;
mod config;
pub mod fs;
mod manifest;
mod outcome;
mod types;

use __private::bindings::canopy::hooks::host as wit_host;
use __private::bindings::canopy::hooks::types as wit;

pub use command::{Command, plain_words, run_command};
pub use config::Config;
pub use manifest::Manifest;
pub use outcome::Outcome;
pub use types::{
    AgentPlatform, Decision, Escape, Exit, GraphRef, Level, Origin, Provenance, SessionTarget,
    Status,
};

/// Exports a Canopy executor: implement this trait on a struct and pass the struct to
/// [`export_executor!`].
///
/// Each call runs in a fresh instance: nothing a call leaves in memory is seen by the next one.
pub trait Executor {
    /// The plugin's manifest: name, version, modes served, capabilities needed, config schema and
    /// template fields. Called at install, without any capability granted.
    fn describe() -> Manifest;

    /// Check a config before Canopy saves it in a hook or node. Template fields arrive rendered
    /// with placeholder values. Return an error that names the field and what is allowed.
    /// The default accepts every config.
    fn validate(mode: &str, config: &Config) -> Result<(), String> {
        let _ = (mode, config);
        Ok(())
    }

    /// Do the work. Return `Ok` with a completed, failed or blocked [`Outcome`] when the work ran;
    /// `Err` when the executor itself could not run (a bad config, a host refusal).
    fn execute(invocation: Invocation) -> Result<Outcome, String>;
}

/// One `execute` call: the mode, the rendered config, the marker values and where it came from.
#[derive(Debug, Clone)]
pub struct Invocation {
    inner: wit::Invocation,
}

impl Invocation {
    /// The mode the work names.
    pub fn mode(&self) -> &str {
        &self.inner.mode
    }

    /// The config with its template fields rendered, parsed into your type.
    pub fn config<T: serde::de::DeserializeOwned>(&self) -> Result<T, String> {
        Config::from_json(&self.inner.config)?.parse()
    }

    /// The config as raw JSON text.
    pub fn config_json(&self) -> &str {
        &self.inner.config
    }

    /// The raw (unescaped) value of a marker, by name without braces (`"spec_name"`).
    /// Known markers without a value for the event are `"(none)"`; unknown names are `None`.
    pub fn marker(&self, name: &str) -> Option<&str> {
        self.inner
            .markers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// Every marker and its raw value, in the host's order.
    pub fn markers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.inner
            .markers
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str()))
    }

    /// Absolute path of the directory the work runs in.
    pub fn workdir(&self) -> &str {
        &self.inner.workdir
    }

    /// What launched the work: its origin, graph, run, event, hook index, spec.
    pub fn provenance(&self) -> Provenance {
        Provenance::from(&self.inner.provenance)
    }

    /// Milliseconds the whole call may take.
    pub fn deadline_ms(&self) -> u64 {
        self.inner.deadline_ms
    }

    /// A warm harness session to resume, if the host handed one over.
    pub fn resume_session(&self) -> Option<&str> {
        self.inner.resume_session.as_deref()
    }

    /// When the call is a sync hook: the input of the action it decides on, as JSON text of
    /// an object. Answer with [`Outcome::allow`], [`Outcome::deny`] or [`Outcome::patch`].
    pub fn decision_input(&self) -> Option<&str> {
        self.inner.decision_input.as_deref()
    }
}

/// Writing to the daemon's log, tagged with the plugin's name.
pub mod log {
    use super::{Level, wit_host};

    /// Log at `level`.
    pub fn log(level: Level, message: &str) {
        wit_host::log(level.into(), message);
    }
    /// Log at debug level.
    pub fn debug(message: &str) {
        log(Level::Debug, message);
    }
    /// Log at info level.
    pub fn info(message: &str) {
        log(Level::Info, message);
    }
    /// Log at warn level.
    pub fn warn(message: &str) {
        log(Level::Warn, message);
    }
    /// Log at error level.
    pub fn error(message: &str) {
        log(Level::Error, message);
    }
}

/// Queue `text` for an interactive session (capability `sessions`). Returns the message id.
/// Delivery is the daemon's job; this returns at once.
pub fn enqueue_message(
    target: &SessionTarget,
    text: &str,
    provenance: &Provenance,
) -> Result<String, String> {
    wit_host::enqueue_message(&target.into(), text, &provenance.into())
}

/// The daemon's configured agent platform named `name` (how to launch that agent CLI).
pub fn agent_platform(name: &str) -> Result<AgentPlatform, String> {
    wit_host::agent_platform(name).map(AgentPlatform::from)
}

/// Exports a type implementing [`Executor`] as the component's `canopy:hooks/plugin` interface.
/// Call it once per plugin crate.
#[macro_export]
macro_rules! export_executor {
    ($executor:ty) => {
        const _: () = {
            struct __CanopyExecutor;

            impl $crate::__private::Guest for __CanopyExecutor {
                fn describe() -> $crate::__private::WitManifest {
                    $crate::__private::describe::<$executor>()
                }
                fn validate(
                    mode: ::std::string::String,
                    config: ::std::string::String,
                ) -> ::std::result::Result<(), ::std::string::String> {
                    $crate::__private::validate::<$executor>(mode, config)
                }
                fn execute(
                    invocation: $crate::__private::WitInvocation,
                ) -> ::std::result::Result<$crate::__private::WitOutcome, ::std::string::String>
                {
                    $crate::__private::execute::<$executor>(invocation)
                }
            }

            $crate::__private::bindings::__export_executor_bindings!(
                __CanopyExecutor with_types_in $crate::__private::bindings
            );
        };
    };
}

/// Implementation details of [`export_executor!`]; not part of the API.
#[doc(hidden)]
pub mod __private {
    #[allow(missing_docs, clippy::all)]
    pub mod bindings {
        wit_bindgen::generate!({
            path: "../wit/since_v0.2.0",
            additional_derives: [PartialEq],
            world: "executor",
            pub_export_macro: true,
            export_macro_name: "__export_executor_bindings",
            default_bindings_module: "::canopy_plugin_sdk::__private::bindings",
            runtime_path: "::canopy_plugin_sdk::__private::wit_bindgen::rt",
            // The world's WASI imports are the `wasip2` crate's (the same 0.2.12 packages).
            with: {
                "wasi:cli/environment@0.2.12": ::wasip2::cli::environment,
                "wasi:cli/exit@0.2.12": ::wasip2::cli::exit,
                "wasi:cli/stdin@0.2.12": ::wasip2::cli::stdin,
                "wasi:cli/stdout@0.2.12": ::wasip2::cli::stdout,
                "wasi:cli/stderr@0.2.12": ::wasip2::cli::stderr,
                "wasi:clocks/monotonic-clock@0.2.12": ::wasip2::clocks::monotonic_clock,
                "wasi:clocks/wall-clock@0.2.12": ::wasip2::clocks::wall_clock,
                "wasi:filesystem/types@0.2.12": ::wasip2::filesystem::types,
                "wasi:filesystem/preopens@0.2.12": ::wasip2::filesystem::preopens,
                "wasi:io/error@0.2.12": ::wasip2::io::error,
                "wasi:io/poll@0.2.12": ::wasip2::io::poll,
                "wasi:io/streams@0.2.12": ::wasip2::io::streams,
                "wasi:random/random@0.2.12": ::wasip2::random::random,
            },
        });
    }

    pub use crate::wit::{
        Invocation as WitInvocation, Manifest as WitManifest, Outcome as WitOutcome,
    };
    pub use bindings::exports::canopy::hooks::plugin::Guest;
    pub use wit_bindgen;

    use crate::{Config, Executor, Invocation};

    pub fn describe<E: Executor>() -> WitManifest {
        E::describe().into_wit()
    }

    pub fn validate<E: Executor>(mode: String, config: String) -> Result<(), String> {
        let config = Config::from_json(&config)?;
        E::validate(&mode, &config)
    }

    pub fn execute<E: Executor>(invocation: WitInvocation) -> Result<WitOutcome, String> {
        E::execute(Invocation { inner: invocation }).map(crate::Outcome::into_wit)
    }
}
