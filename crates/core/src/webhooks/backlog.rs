//! What the `spec` handler needs of the engine, and nothing more: adding a spec to the backlog,
//! and adding it to a queue. The ingress holds this port, not the engine.

use futures_util::future::BoxFuture;

use crate::engine::{Engine, NewSpec};

/// A spec the backlog took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Added {
    pub id: String,
    pub name: String,
}

/// Where a `spec` handler puts its specs. Errors are what the delivery records, as said.
pub trait Backlog: Send + Sync {
    /// Adds a spec to the backlog.
    fn add(&self, spec: NewSpec) -> BoxFuture<'_, Result<Added, String>>;
    /// Adds a spec of the backlog to the end of a queue (by name or id); the queue's id.
    fn enqueue<'a>(
        &'a self,
        queue: &'a str,
        spec_id: &'a str,
    ) -> BoxFuture<'a, Result<String, String>>;
}

impl Backlog for Engine {
    fn add(&self, spec: NewSpec) -> BoxFuture<'_, Result<Added, String>> {
        Box::pin(async move {
            self.create_spec(spec)
                .await
                .map(|spec| Added {
                    id: spec.id,
                    name: spec.name,
                })
                .map_err(|err| err.to_string())
        })
    }

    fn enqueue<'a>(
        &'a self,
        queue: &'a str,
        spec_id: &'a str,
    ) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            self.queue_add(queue, spec_id, None)
                .await
                .map(|queue| queue.id)
                .map_err(|err| err.to_string())
        })
    }
}
