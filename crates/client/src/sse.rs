//! Reading the daemon's Server-Sent Events streams (`GET /api/feed?follow=true`): `feed --follow`,
//! the TUI's live view and the MCP server's change notifications all read them through here.
//!
//! The parsing is `sse-stream`'s (the crate rmcp's HTTP transport uses): frames split across
//! chunks, multi-line data, comments (the daemon's keep-alives) and UTF-8 cut mid-character are
//! handled there, not by hand.

use anyhow::{Context as _, Result, anyhow};
use futures_util::StreamExt as _;
use serde_json::Value;
use sse_stream::SseStream;

use crate::ApiFailure;

/// One event of a stream: its name (`feed`, `lagged`, ...), its id and its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseFrame {
    pub event: String,
    pub id: Option<String>,
    pub data: String,
}

impl SseFrame {
    /// The data as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or(Value::Null)
    }
}

/// The events of one streamed answer, in order.
pub struct SseEvents {
    inner: SseStream<reqwest::Body>,
}

impl std::fmt::Debug for SseEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseEvents").finish_non_exhaustive()
    }
}

impl SseEvents {
    /// Opens a stream: sends the request and, when the daemon refuses it, returns its error
    /// (an [`ApiFailure`] naming what was wrong) instead of a stream.
    pub async fn open(request: reqwest::RequestBuilder) -> Result<Self> {
        let response = request.send().await.context("cannot reach the daemon")?;
        let status = response.status();
        if !status.is_success() {
            let body = response.bytes().await.unwrap_or_default();
            return Err(ApiFailure::from_answer(status.as_u16(), &body).into());
        }
        Ok(Self {
            inner: SseStream::new(reqwest::Body::from(response)),
        })
    }

    /// The next event; `None` once the daemon ended the stream, an error when it broke.
    pub async fn next(&mut self) -> Option<Result<SseFrame>> {
        let sse = match self.inner.next().await? {
            Ok(sse) => sse,
            Err(err) => return Some(Err(anyhow!("the event stream broke: {err}"))),
        };
        Some(Ok(SseFrame {
            event: sse.event.unwrap_or_else(|| "message".to_string()),
            id: sse.id,
            data: sse.data.unwrap_or_default(),
        }))
    }
}
