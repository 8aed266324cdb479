//! Building the result of an `execute` call.

use crate::{Status, wit};

/// How a piece of work ended: a status, an optional one-line summary, detail text and the
/// harness session it ran in.
#[derive(Debug, Clone)]
pub struct Outcome {
    inner: wit::Outcome,
}

impl Outcome {
    fn with_status(status: Status) -> Self {
        Self {
            inner: wit::Outcome {
                status,
                summary: None,
                detail: String::new(),
                harness_session: None,
            },
        }
    }

    /// The work is done.
    pub fn completed() -> Self {
        Self::with_status(Status::Completed)
    }

    /// The work ran and failed, for `reason`.
    pub fn failed(reason: impl Into<String>) -> Self {
        Self::with_status(Status::Failed(reason.into()))
    }

    /// The work cannot go on without a person; a graph pauses with `blocker`.
    pub fn blocked(blocker: impl Into<String>) -> Self {
        Self::with_status(Status::Blocked(blocker.into()))
    }

    /// Sets the one-line summary (only its first line is kept).
    pub fn with_summary(mut self, summary: impl Into<String>) -> Self {
        let summary: String = summary.into();
        let line = summary
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        self.inner.summary = (!line.is_empty()).then_some(line);
        self
    }

    /// Sets the detail text.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.inner.detail = detail.into();
        self
    }

    /// Records the harness (agent CLI) session the work ran in.
    pub fn with_harness_session(mut self, session: impl Into<String>) -> Self {
        self.inner.harness_session = Some(session.into());
        self
    }

    /// The status so far.
    pub fn status(&self) -> &Status {
        &self.inner.status
    }

    pub(crate) fn into_wit(self) -> wit::Outcome {
        self.inner
    }
}

/// What a process may write to the file named by `CANOPY_RESULT_FILE` (the result protocol).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ResultFile {
    status: Option<String>,
    summary: Option<String>,
    blocker: Option<String>,
    reason: Option<String>,
    session: Option<String>,
}

/// Bytes of stderr quoted in a failure reason.
const STDERR_TAIL: usize = 2_000;

impl Outcome {
    /// The outcome of a process under Canopy's result protocol.
    ///
    /// Without a result file the exit code decides: 0 is completed, anything else failed with
    /// the code and the tail of stderr. A result file (see [`crate::Command::capture_result`])
    /// may say more: `{"status": "completed" | "failed" | "blocked", "summary": "...",
    /// "blocker": "...", "reason": "...", "session": "..."}`; every field is optional and a
    /// `status` overrides the exit code. The summary defaults to the last non-empty line of
    /// stdout. The detail is stdout followed by stderr.
    pub fn from_exit(exit: &crate::Exit) -> Result<Self, String> {
        let detail = format!("{}{}", exit.stdout, exit.stderr);
        if exit.timed_out {
            return Ok(Outcome::failed(format!(
                "timed out after {} ms: {}",
                exit.duration_ms,
                tail(&exit.stderr, STDERR_TAIL)
            ))
            .with_detail(detail));
        }
        let reported: ResultFile = match exit.result.as_deref().map(str::trim) {
            None | Some("") => ResultFile::default(),
            Some(text) => serde_json::from_str(text).map_err(|err| {
                format!("CANOPY_RESULT_FILE does not hold a valid result object: {err}")
            })?,
        };
        let outcome = match reported.status.as_deref() {
            Some("blocked") => Outcome::blocked(
                reported
                    .blocker
                    .clone()
                    .or(reported.reason.clone())
                    .unwrap_or_else(|| "blocked (no blocker given)".to_string()),
            ),
            Some("failed") => Outcome::failed(
                reported
                    .reason
                    .clone()
                    .or(reported.blocker.clone())
                    .unwrap_or_else(|| "failed (no reason given)".to_string()),
            ),
            Some("completed") => Outcome::completed(),
            Some(other) => {
                return Err(format!(
                    "result file status `{other}` is not one of completed, failed, blocked"
                ));
            }
            None => match exit.code {
                Some(0) => Outcome::completed(),
                code => {
                    let code =
                        code.map_or_else(|| "a signal".to_string(), |c| format!("exit code {c}"));
                    // Its stderr's last lines say why; without any, the code says it all.
                    let said = tail(&exit.stderr, STDERR_TAIL);
                    Outcome::failed(if said.trim().is_empty() {
                        format!("exited with {code}")
                    } else {
                        format!("exited with {code}: {said}")
                    })
                }
            },
        };
        let mut outcome = outcome.with_detail(detail);
        if let Some(summary) = reported.summary.or_else(|| last_line(&exit.stdout)) {
            outcome = outcome.with_summary(summary);
        }
        if let Some(session) = reported.session {
            outcome = outcome.with_harness_session(session);
        }
        Ok(outcome)
    }
}

fn last_line(text: &str) -> Option<String> {
    text.lines()
        .rev()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .map(str::to_string)
}

/// The last `max` bytes of `text` (on a char boundary), trimmed.
fn tail(text: &str, max: usize) -> &str {
    let text = text.trim();
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}
