//! Webhook deliveries: each request a webhook received and what its handler did.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::state_enum;

state_enum! {
    /// Where a delivery is.
    pub enum DeliveryStatus {
        /// Recorded; its handler has not started (it waits in the hook's queue).
        Accepted = "accepted",
        /// Recorded, but the hook's rules refused it; nothing runs.
        Ignored = "ignored",
        /// Its handler runs.
        Running = "running",
        /// The handler completed.
        Completed = "completed",
        /// The handler failed or could not run.
        Failed = "failed",
        /// The handler was stopped at its deadline.
        TimedOut = "timed_out",
        /// A planned stop killed the handler's processes before it ended.
        Interrupted = "interrupted",
        /// The daemon died while the handler ran: what it did is unknown; never replayed.
        InterruptedUnknown = "interrupted_unknown",
        /// A sync hook on `webhook.pre_handle` denied it; its handler never ran.
        Denied = "denied",
    }
}

impl DeliveryStatus {
    /// Whether the delivery will not change again (only a redelivery runs it anew). A newer
    /// daemon's status is taken as final.
    pub fn is_finished(self) -> bool {
        match self {
            Self::Accepted | Self::Running => false,
            Self::Ignored
            | Self::Completed
            | Self::Failed
            | Self::TimedOut
            | Self::Interrupted
            | Self::InterruptedUnknown
            | Self::Denied
            | Self::Unknown => true,
        }
    }
}

/// A delivery as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Delivery {
    pub id: String,
    pub scope: String,
    pub hook: String,
    pub handler: String,
    pub node: String,
    pub status: DeliveryStatus,
    pub reason: Option<String>,
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub content_type: Option<String>,
    pub headers: Vec<(String, String)>,
    /// Body size in bytes.
    pub size: i64,
    pub redelivery_of: Option<String>,
    pub test: bool,
    pub received_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub duration_ms: Option<i64>,
    pub error: Option<String>,
    pub output: Option<String>,
    pub result: Option<Value>,
}

/// What a waited-for delivery came to.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Outcome {
    pub delivery_id: String,
    pub status: DeliveryStatus,
    pub reason: Option<String>,
    pub error: Option<String>,
    pub output: Option<String>,
    pub result: Option<Value>,
    pub duration_ms: Option<i64>,
    /// This is the outcome of an earlier delivery with the same sender id: the request was a
    /// copy of it, and did not run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
}

impl From<&Delivery> for Outcome {
    fn from(delivery: &Delivery) -> Self {
        Self {
            delivery_id: delivery.id.clone(),
            status: delivery.status,
            reason: delivery.reason.clone(),
            error: delivery.error.clone(),
            output: delivery.output.clone(),
            result: delivery.result.clone(),
            duration_ms: delivery.duration_ms,
            duplicate: false,
        }
    }
}

/// One delivery as `GET /api/webhooks/deliveries/{id}` shows it: the record and its body (as
/// text; bytes that are not UTF-8 shown as U+FFFD).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DeliveryDetail {
    #[serde(flatten)]
    pub delivery: Delivery,
    pub body: String,
}
