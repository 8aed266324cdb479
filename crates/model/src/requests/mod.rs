//! What clients send: the API's request bodies and query strings, one type per shape, shared
//! by the daemon (which parses them), the CLI (which builds them) and the OpenAPI document
//! (which describes them, with examples).
//!
//! Every type refuses unknown fields, so a misspelt field or parameter is an error that names
//! it. An absent optional field and `null` mean the same, except where a field says `null`
//! clears something (a spec's `workdir`, a queue member's `group`, a graph's `on_completed`);
//! serialized, an absent field is left out.

pub mod crons;
pub mod daemon;
pub mod feed;
pub mod graphs;
pub mod hooks;
pub mod plugins;
pub mod queues;
pub mod sessions;
pub mod specs;
pub mod webhooks;
