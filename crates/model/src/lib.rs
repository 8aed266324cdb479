//! Canopy's domain model: what every other crate speaks.
//!
//! - [`events`]: the event taxonomy (one file per family), the feed's envelope, who caused an
//!   event and how deep in a chain of hooks it is.
//! - [`markers`]: the `{{name}}` placeholders of executor configs and the one place they are
//!   rendered (a value is never parsed by a shell).
//! - [`limits`]: how an agent CLI reports a usage limit, and when it resets.
//! - [`pattern`]: the one matcher of configured values (exact, glob, `re:` regex).
//! - [`runtime_hooks`]: hooks inside the agents Canopy launches, by phase, with their matchers.
//! - [`since`]: the one parser of `since` (a time, or a duration back from now).
//! - [`call_env`]: the variables every process of an automation's call gets.
//! - [`capabilities`]: what a plugin may be granted, parsed and printed.
//! - [`hook_keys`]: the keys of a graph's `hooks` map and the events they fire on.
//! - [`spec_format`]: the spec body format (`<spec>` and its seven sections).
//! - [`work`]: what a piece of work carries into its records (provenance, plugin identity) and
//!   how a call ended (its outcome).
//! - [`records`]: what the daemon keeps and the API shows (graphs, runs, hook runs, …) and
//!   their states, one set of types for the store, the daemon and every client.
//! - [`requests`]: what clients send (request bodies and query strings), one set of types for
//!   the daemon, the CLI and the OpenAPI document.
//! - [`text`]: "did you mean", bounded tails, time checks shared by messages.
//!
//! This crate depends on no other Canopy crate but `canopy-shell-words`: a wrong import into it
//! is a build error (see `ARCHITECTURE.md`).

pub mod call_env;
pub mod capabilities;
pub mod events;
pub mod hook_keys;
pub mod limits;
pub mod markers;
pub mod pattern;
pub mod records;
pub mod requests;
pub mod runtime_hooks;
pub mod since;
pub mod spec_format;
pub mod states;
pub mod text;
pub mod time;
pub mod work;
