//! Installed plugins as rows of the `plugins` table. The records and their queries live in the
//! store ([`canopy_store::plugins`]); the component itself lives in the data dir as
//! `<sha256>.wasm`.

pub use canopy_model::records::plugins::{Manifest, PluginRecord, PluginState, TemplateField};
