//! Webhook ingress: inbound HTTP on its own listener, turned into specs, commands and executor
//! runs, each delivery recorded durably before it is answered.

pub mod config;
