//! Building the result of an `execute` call.

use crate::{Decision, Status, wit};

/// How a piece of work ended: a status, an optional one-line summary, detail text, the
/// harness session it ran in, and (for a sync hook) its decision.
#[derive(Debug, Clone)]
pub struct Outcome {
    status: Status,
    summary: Option<String>,
    detail: String,
    harness_session: Option<String>,
    decision: Option<Decision>,
}

impl Outcome {
    fn with_status(status: Status) -> Self {
        Self {
            status,
            summary: None,
            detail: String::new(),
            harness_session: None,
            decision: None,
        }
    }

    fn decided(decision: Decision) -> Self {
        let mut outcome = Self::completed();
        outcome.decision = Some(decision);
        outcome
    }

    /// A sync hook's answer: the action goes ahead as asked.
    pub fn allow() -> Self {
        Self::decided(Decision::Allow)
    }

    /// A sync hook's answer: the action does not happen, for `reason` (shown to whoever asked
    /// for the action, and recorded).
    pub fn deny(reason: impl Into<String>) -> Self {
        Self::decided(Decision::Deny(reason.into()))
    }

    /// A sync hook's answer: the action goes ahead with its input changed. `fields` is an
    /// object whose fields replace the input's; the event's patch schema says which it may
    /// change, and a patch outside it is refused (recorded `rejected`) and not applied.
    pub fn patch(fields: serde_json::Value) -> Self {
        Self::decided(Decision::Patch(fields.to_string()))
    }

    /// Something the work waited on was stopped at its deadline; `reason` says what.
    pub fn timed_out(reason: impl Into<String>) -> Self {
        Self::with_status(Status::TimedOut(reason.into()))
    }

    /// The decision this outcome carries, if any.
    pub fn decision(&self) -> Option<&Decision> {
        self.decision.as_ref()
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
        self.summary = (!line.is_empty()).then_some(line);
        self
    }

    /// Sets the detail text.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }

    /// Records the harness (agent CLI) session the work ran in.
    pub fn with_harness_session(mut self, session: impl Into<String>) -> Self {
        self.harness_session = Some(session.into());
        self
    }

    /// The status so far.
    pub fn status(&self) -> &Status {
        &self.status
    }

    pub(crate) fn into_wit(self) -> wit::Outcome {
        wit::Outcome {
            status: self.status.into(),
            summary: self.summary,
            detail: self.detail,
            harness_session: self.harness_session,
            decision: self.decision.map(Into::into),
        }
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
            return Ok(Outcome::timed_out(timed_out(exit, "")).with_detail(detail));
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

/// A decision a process writes on stdout (the decision protocol).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionLine {
    decision: String,
    reason: Option<String>,
    patch: Option<serde_json::Value>,
}

impl Outcome {
    /// A sync hook's decision from a process, as agent runtimes' command hooks decide: exit 0
    /// allows, exit 2 denies with its stderr as the reason, and a JSON object on stdout
    /// (`{"decision": "allow" | "deny" | "patch", "reason": "...", "patch": {...}}`) says it
    /// explicitly, whatever the exit code. Any other exit, or a stop at the timeout, fails the
    /// hook (the host then applies the hook's `required`).
    pub fn decision_from_exit(exit: &crate::Exit) -> Result<Self, String> {
        let detail = format!("{}{}", exit.stdout, exit.stderr);
        if exit.timed_out {
            return Ok(Outcome::timed_out(timed_out(exit, " before deciding")).with_detail(detail));
        }
        let stdout = exit.stdout.trim();
        if stdout.starts_with('{') {
            let line: DecisionLine = serde_json::from_str(stdout).map_err(|err| {
                format!(
                    "stdout starts with `{{` but is not a decision object ({{\"decision\": \"allow\" | \"deny\" | \"patch\", \"reason\": ..., \"patch\": {{...}}}}): {err}"
                )
            })?;
            let outcome = match (line.decision.as_str(), line.patch) {
                ("allow", None) => Outcome::allow(),
                ("deny", None) => Outcome::deny(
                    line.reason
                        .unwrap_or_else(|| "denied (no reason given)".to_string()),
                ),
                ("patch", Some(patch @ serde_json::Value::Object(_))) => Outcome::patch(patch),
                ("patch", _) => {
                    return Err(
                        "decision `patch` needs a `patch` object with the fields to change"
                            .to_string(),
                    );
                }
                ("allow" | "deny", Some(_)) => {
                    return Err(format!(
                        "decision `{}` takes no `patch` (only `patch` does)",
                        line.decision
                    ));
                }
                (other, _) => {
                    return Err(format!(
                        "decision `{other}` is not one of allow, deny, patch"
                    ));
                }
            };
            return Ok(outcome.with_detail(detail));
        }
        let outcome = match exit.code {
            Some(0) => Outcome::allow(),
            Some(2) => {
                let said = tail(&exit.stderr, STDERR_TAIL);
                Outcome::deny(if said.is_empty() {
                    "denied (exit code 2, nothing on stderr)".to_string()
                } else {
                    said.to_string()
                })
            }
            code => {
                let code =
                    code.map_or_else(|| "a signal".to_string(), |c| format!("exit code {c}"));
                let said = tail(&exit.stderr, STDERR_TAIL);
                Outcome::failed(if said.is_empty() {
                    format!("exited with {code} (a decision is exit 0 to allow or 2 to deny)")
                } else {
                    format!(
                        "exited with {code} (a decision is exit 0 to allow or 2 to deny): {said}"
                    )
                })
            }
        };
        Ok(outcome.with_detail(detail))
    }
}

/// Why a process was stopped at its timeout: how long it ran, and its stderr's last lines.
fn timed_out(exit: &crate::Exit, what: &str) -> String {
    let said = tail(&exit.stderr, STDERR_TAIL);
    if said.is_empty() {
        format!("timed out after {} ms{what}", exit.duration_ms)
    } else {
        format!("timed out after {} ms{what}: {said}", exit.duration_ms)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(code: Option<i32>, stdout: &str, stderr: &str) -> crate::Exit {
        crate::Exit {
            code,
            timed_out: false,
            stdout: stdout.to_string(),
            stderr: stderr.to_string(),
            duration_ms: 5,
            result: None,
        }
    }

    fn decided(exit: &crate::Exit) -> Result<(Status, Option<Decision>), String> {
        Outcome::decision_from_exit(exit).map(|o| (o.status, o.decision))
    }

    #[test]
    fn a_command_decides_by_exit_code_or_a_decision_object() {
        assert_eq!(
            decided(&exit(Some(0), "checked\n", "")),
            Ok((Status::Completed, Some(Decision::Allow)))
        );
        assert_eq!(
            decided(&exit(Some(2), "", "no force pushes\n")),
            Ok((
                Status::Completed,
                Some(Decision::Deny("no force pushes".to_string()))
            ))
        );
        assert_eq!(
            decided(&exit(Some(2), "", "")),
            Ok((
                Status::Completed,
                Some(Decision::Deny(
                    "denied (exit code 2, nothing on stderr)".to_string()
                ))
            ))
        );
        // An object on stdout says it whatever the exit code.
        assert_eq!(
            decided(&exit(
                Some(0),
                r#"{"decision": "patch", "patch": {"prompt": "be brief"}}"#,
                ""
            )),
            Ok((
                Status::Completed,
                Some(Decision::Patch(r#"{"prompt":"be brief"}"#.to_string()))
            ))
        );
        assert_eq!(
            decided(&exit(
                Some(1),
                r#"{"decision": "deny", "reason": "policy"}"#,
                ""
            )),
            Ok((
                Status::Completed,
                Some(Decision::Deny("policy".to_string()))
            ))
        );
        // Anything else is a failure, never a decision.
        let (status, decision) = decided(&exit(Some(1), "", "boom")).expect("an outcome");
        assert_eq!(
            status,
            Status::Failed(
                "exited with exit code 1 (a decision is exit 0 to allow or 2 to deny): boom"
                    .to_string()
            )
        );
        assert_eq!(decision, None);
        let mut slow = exit(None, "", "");
        slow.timed_out = true;
        assert!(matches!(decided(&slow), Ok((Status::TimedOut(_), None))));
    }

    #[test]
    fn a_malformed_decision_object_is_an_error_naming_what_is_wrong() {
        let err = decided(&exit(Some(0), r#"{"decision": "maybe"}"#, "")).expect_err("refused");
        assert_eq!(err, "decision `maybe` is not one of allow, deny, patch");
        let err = decided(&exit(Some(0), r#"{"decision": "patch"}"#, "")).expect_err("refused");
        assert!(err.contains("needs a `patch` object"), "{err}");
        let err = decided(&exit(Some(0), r#"{"decision": "allow", "patch": {}}"#, ""))
            .expect_err("refused");
        assert!(err.contains("takes no `patch`"), "{err}");
        let err = decided(&exit(Some(0), r#"{"verdict": "allow"}"#, "")).expect_err("refused");
        assert!(
            err.starts_with("stdout starts with `{` but is not a decision object"),
            "{err}"
        );
    }
}
