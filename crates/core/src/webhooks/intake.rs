//! What a request to a webhook becomes once it is authenticated and its body read: the
//! delivery to record, and whether the hook's rules ignore it. The listener and the API's test
//! route (`webhooks test`) both take a request in through [`intake`], so a test delivery is
//! judged and recorded exactly as a real one.

use http::{HeaderMap, header};
use serde_json::Value;

use super::config::Hook;
use super::rules::Request;
use super::{MAX_HEADER_VALUE, Received, auth};

/// A request taken in.
#[derive(Debug)]
pub struct Intake {
    pub received: Received,
    /// Why the hook's rules ignore it (it is recorded `ignored`, nothing runs).
    pub ignored: Option<String>,
}

/// Why a request is refused before anything of it is recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// A header the rules read came more than once (`X-GitHub-Event: push` and `: ping`
    /// could pass a rule on one value and be handled as the other).
    RepeatedHeader(String),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::RepeatedHeader(name) => write!(
                f,
                "header `{name}` is sent more than once; this webhook's rules read it, and take it once"
            ),
        }
    }
}

/// Takes in a request to `hook`: `query` is the raw query string, `body` the whole body.
pub fn intake(
    hook: &Hook,
    method: &str,
    path: String,
    query: Option<&str>,
    headers: &HeaderMap,
    body: Vec<u8>,
) -> Result<Intake, Refused> {
    if let Some(name) = hook.rule.as_ref().and_then(|rule| {
        rule.header_names()
            .into_iter()
            .find(|name| headers.get_all(*name).iter().nth(1).is_some())
    }) {
        return Err(Refused::RepeatedHeader(name.to_string()));
    }
    let pairs: Vec<(String, String)> = query
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let ignored = hook.rule.as_ref().and_then(|rule| {
        let json: Option<Value> = serde_json::from_slice(&body).ok();
        rule.check(&Request {
            json: json.as_ref(),
            headers,
            query: &pairs,
        })
        .err()
    });
    let received = Received {
        method: method.to_string(),
        path,
        query: query.map(auth::recorded_query),
        content_type: headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        headers: recorded_headers(&hook.headers, headers),
        body,
        sender_delivery_id: hook.dedup.as_ref().and_then(|dedup| {
            headers
                .get(dedup.header.as_str())
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|id| !id.is_empty() && id.len() <= super::config::MAX_DELIVERY_ID)
                .map(str::to_string)
        }),
    };
    Ok(Intake { received, ignored })
}

/// The headers of `wanted` (lowercase names) the request has, each value at most
/// [`MAX_HEADER_VALUE`] bytes. Auth headers are never among `wanted`; one whose name looks like
/// a credential (`x-gitlab-token`, `x-api-key`) is recorded `(redacted)`.
fn recorded_headers(wanted: &[String], headers: &HeaderMap) -> Vec<(String, String)> {
    let mut recorded = Vec::new();
    for name in wanted {
        if headers.contains_key(name.as_str()) && auth::looks_secret(name) {
            recorded.push((name.clone(), "(redacted)".to_string()));
            continue;
        }
        if let Some(value) = headers.get(name.as_str()) {
            let text = String::from_utf8_lossy(value.as_bytes());
            let mut end = text.len().min(MAX_HEADER_VALUE);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            recorded.push((name.clone(), text[..end].to_string()));
        }
    }
    recorded
}
