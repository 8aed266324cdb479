//! A client of the daemon's HTTP API: finds the daemon through the data dir, sends the token
//! (the call's own when it runs inside an automation), and turns API errors into messages. The
//! CLI, the TUI and the MCP server all talk to the daemon through it.
//!
//! - [`sse`]: the daemon's Server-Sent Events streams (`feed --follow`, the TUI's live view).

pub mod sse;

use anyhow::{Context, Result, anyhow, bail};
use serde::de::DeserializeOwned;

use canopy_datadir::DataDir;

/// A connection to the daemon of one data dir.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    http: reqwest::Client,
    /// For long-lived streams (`inbox --follow`): no overall deadline.
    streaming: reqwest::Client,
    data_dir: std::path::PathBuf,
}

/// How long connecting to the daemon may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long one request may take (a dry run with `--execute` waits for its hooks).
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15 * 60);
/// An idle pooled connection is dropped after this: before the daemon closes it (30 s), so a
/// request is never sent on a connection the daemon is closing.
pub const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

impl Client {
    /// Reads the daemon's address from the data dir. Fails, saying how to start a daemon, when
    /// none is running there.
    /// Every request carries the daemon's API token, read from the data dir next to the address.
    pub fn connect(data: &DataDir) -> Result<Self> {
        let address = std::fs::read_to_string(data.address_file()).unwrap_or_default();
        let base = address.trim().to_string();
        if base.is_empty() {
            return Err(no_daemon(data.root()));
        }
        let headers = auth_headers(data)?;
        let http = reqwest::Client::builder()
            .no_proxy()
            .default_headers(headers.clone())
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .pool_idle_timeout(IDLE_TIMEOUT)
            .build()
            .context("cannot build the HTTP client")?;
        let streaming = reqwest::Client::builder()
            .no_proxy()
            .default_headers(headers)
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_idle_timeout(IDLE_TIMEOUT)
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Self {
            base,
            http,
            streaming,
            data_dir: data.root().to_path_buf(),
        })
    }

    /// The daemon's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends a request and decodes the JSON answer; an API error becomes its message.
    pub async fn send<T: DeserializeOwned>(&self, request: reqwest::RequestBuilder) -> Result<T> {
        let response = request.send().await.map_err(|err| {
            if err.is_connect() {
                no_daemon(&self.data_dir)
            } else {
                anyhow!("cannot reach the daemon at {}: {err}", self.base)
            }
        })?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .context("cannot read the daemon's answer")?;
        if !status.is_success() {
            return Err(ApiFailure::from_answer(status.as_u16(), &body).into());
        }
        serde_json::from_slice(&body)
            .with_context(|| format!("unexpected answer from the daemon ({status})"))
    }

    /// GET a path under the base URL.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.send(self.http.get(self.url(path))).await
    }

    /// POST a JSON body (one of `canopy_model::requests`, or any JSON value).
    pub async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &(impl serde::Serialize + ?Sized),
    ) -> Result<T> {
        self.send(self.http.post(self.url(path)).json(body)).await
    }

    /// DELETE.
    pub async fn delete<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.send(self.http.delete(self.url(path))).await
    }

    /// A request for a long-lived stream: connect timeout only.
    pub fn stream(&self, path: &str) -> reqwest::RequestBuilder {
        self.streaming.get(self.url(path))
    }

    /// A request builder for anything else.
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http.request(method, self.url(path))
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

/// An error answer from the daemon: its HTTP status, its code and its message (what the CLI
/// prints, and what an MCP tool error carries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiFailure {
    /// The HTTP status; 0 when the daemon did not answer.
    pub status: u16,
    /// The API's error code (`bad_request`, `not_found`, ...); empty when it gave none.
    pub code: String,
    pub message: String,
}

impl ApiFailure {
    /// An error answer's status and body (`{"error": {"code", "message"}}`); a body that is not
    /// one is the message as it came.
    pub fn from_answer(status: u16, body: &[u8]) -> Self {
        let answer = serde_json::from_slice::<serde_json::Value>(body).unwrap_or_default();
        let at = |pointer: &str| answer.pointer(pointer).and_then(serde_json::Value::as_str);
        let message = match at("/error/message") {
            Some(message) => message.to_string(),
            None if body.is_empty() => format!("the daemon refused ({status})"),
            None => String::from_utf8_lossy(body).into_owned(),
        };
        Self {
            status,
            code: at("/error/code").unwrap_or_default().to_string(),
            message,
        }
    }
}

impl std::fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ApiFailure {}

/// Words an error from the daemon in the command line's terms: each API field the command sent
/// is named by the argument the user typed (`field `queue_id`` becomes `--queue`), so the
/// message points at what to change. Other errors pass unchanged.
pub fn in_cli_terms(err: anyhow::Error, arguments: &[(&str, &str)]) -> anyhow::Error {
    let Some(failure) = err.downcast_ref::<ApiFailure>() else {
        return err;
    };
    let mut message = failure.message.clone();
    for (field, argument) in arguments {
        // An element of a list the command sent from repeated arguments: `field `specs[1]``
        // is the second SPEC.
        let indexed = format!("field `{field}[");
        while let Some(start) = message.find(&indexed) {
            let rest = &message[start + indexed.len()..];
            let Some(end) = rest.find("]`") else { break };
            let Ok(index) = rest[..end].parse::<usize>() else {
                break;
            };
            let replacement = format!("`{argument}` #{}", index + 1);
            message.replace_range(start..start + indexed.len() + end + 2, &replacement);
        }
        for form in ["field", "fields", "query parameter"] {
            message = message.replace(&format!("{form} `{field}`"), &format!("`{argument}`"));
        }
        // A field named on its own (`run it with a queue (`queue_id`)`): only names that
        // cannot be mistaken for a value.
        if field.contains('_') {
            message = message.replace(&format!("`{field}`"), &format!("`{argument}`"));
        }
    }
    ApiFailure {
        status: failure.status,
        code: failure.code.clone(),
        message,
    }
    .into()
}

/// `Authorization: Bearer <token>` with the token the running daemon wrote to the data dir.
/// The token every request carries: the call's own (`CANOPY_CALL_TOKEN`) when this CLI runs in
/// a process the daemon of this data dir started for a hook, cron, webhook handler or node, so
/// the daemon knows which automation asks; else the daemon's, from the data dir.
fn auth_headers(data: &DataDir) -> Result<reqwest::header::HeaderMap> {
    if let Some(token) = call_token(data) {
        let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
            .with_context(|| {
                format!(
                    "`{}` is not a valid token",
                    canopy_model::call_env::CALL_TOKEN
                )
            })?;
        value.set_sensitive(true);
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(reqwest::header::AUTHORIZATION, value);
        return Ok(headers);
    }
    let path = data.token_file();
    let token = std::fs::read_to_string(&path).map_err(|err| {
        anyhow!(
            "cannot read the daemon's API token {}: {err}; the daemon writes it when it starts: restart the daemon of data dir {} (`canopy daemon --data-dir {}`), and run this command as the user who runs the daemon",
            path.display(),
            data.root().display(),
            data.root().display()
        )
    })?;
    let token = token.trim();
    if token.is_empty() {
        bail!(
            "the daemon's API token {} is empty; restart the daemon to write a new one",
            path.display()
        );
    }
    let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
        .with_context(|| format!("the daemon's API token {} is not valid", path.display()))?;
    value.set_sensitive(true);
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(reqwest::header::AUTHORIZATION, value);
    Ok(headers)
}

/// `CANOPY_CALL_TOKEN`, when the daemon that set it serves `data` (its `CANOPY_HOME` is this
/// data dir): a call token means nothing to another daemon.
fn call_token(data: &DataDir) -> Option<String> {
    let token = std::env::var(canopy_model::call_env::CALL_TOKEN).ok()?;
    let home = std::env::var_os("CANOPY_HOME")?;
    let same = |a: &std::path::Path, b: &std::path::Path| {
        a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b)
    };
    (!token.trim().is_empty() && same(std::path::Path::new(&home), data.root()))
        .then(|| token.trim().to_string())
}

/// No daemon answers for the data dir (none runs, or it stopped): a caller that was waiting on
/// one can tell this apart from other failures (`err.downcast_ref::<NoDaemon>()`).
#[derive(Debug)]
pub struct NoDaemon {
    pub data_dir: std::path::PathBuf,
}

impl std::fmt::Display for NoDaemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no canopy daemon is running for data dir {}; start one with `canopy daemon start --data-dir {}`",
            self.data_dir.display(),
            self.data_dir.display()
        )
    }
}

impl std::error::Error for NoDaemon {}

fn no_daemon(data_dir: &std::path::Path) -> anyhow::Error {
    anyhow::Error::new(NoDaemon {
        data_dir: data_dir.to_path_buf(),
    })
}

/// Percent-encodes a path segment (plugin names are plain, but be safe).
pub fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}
