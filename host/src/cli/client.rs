//! The CLI's HTTP client: finds the daemon through the data dir and turns API errors into
//! messages.

use anyhow::{Context, Result, anyhow, bail};
use serde::de::DeserializeOwned;

use crate::datadir::DataDir;

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
            .build()
            .context("cannot build the HTTP client")?;
        let streaming = reqwest::Client::builder()
            .no_proxy()
            .default_headers(headers)
            .connect_timeout(CONNECT_TIMEOUT)
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
            let message = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| {
                    v.pointer("/error/message")
                        .and_then(|m| m.as_str())
                        .map(str::to_string)
                })
                .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
            return Err(anyhow!("{message}"));
        }
        serde_json::from_slice(&body)
            .with_context(|| format!("unexpected answer from the daemon ({status})"))
    }

    /// GET a path under the base URL.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.send(self.http.get(self.url(path))).await
    }

    /// POST JSON.
    pub async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &serde_json::Value,
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

/// `Authorization: Bearer <token>` with the token the running daemon wrote to the data dir.
fn auth_headers(data: &DataDir) -> Result<reqwest::header::HeaderMap> {
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

fn no_daemon(data_dir: &std::path::Path) -> anyhow::Error {
    anyhow!(
        "no canopy daemon is running for data dir {}; start one with `canopy daemon --data-dir {}`",
        data_dir.display(),
        data_dir.display()
    )
}
