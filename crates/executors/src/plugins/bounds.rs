//! What the host accepts from a guest, bounded: outcome fields, error messages and log lines are
//! cut to a size the daemon can store and show, and log lines are escaped so a plugin cannot
//! forge a line of the daemon's log (a newline, an ANSI escape) or flood it.

use std::time::Instant;

use super::bindings::canopy::hooks::types;
use super::call::Reply;

/// Bytes of an outcome's `summary` kept (one line is expected).
pub const SUMMARY_LIMIT: usize = 1024;
/// Bytes of an outcome's `detail` kept: the last ones, as for a process's output.
pub const DETAIL_LIMIT: usize = 64 * 1024;
/// Bytes of a failure reason, blocker or error message kept.
pub const MESSAGE_LIMIT: usize = 4 * 1024;
/// Bytes of a sync hook's patch kept (a longer one is cut, and so refused as not JSON).
pub const PATCH_LIMIT: usize = 64 * 1024;
/// Bytes of a harness session id kept.
pub const SESSION_LIMIT: usize = 256;
/// Bytes of one plugin log line kept.
pub const LOG_LINE_LIMIT: usize = 2 * 1024;

/// Log lines a call may send at once, and how many more it earns per second.
const LOG_BURST: u32 = 200;
const LOG_PER_SECOND: u32 = 50;

/// The first `limit` bytes of `text` (cut on a character boundary), marked when cut.
pub fn head(mut text: String, limit: usize) -> String {
    if text.len() <= limit {
        return text;
    }
    let cut = floor_char_boundary(&text, limit);
    text.truncate(cut);
    text.push_str(" [truncated]");
    text
}

/// The last `limit` bytes of `text` (cut on a character boundary), marked when cut.
pub fn tail(text: String, limit: usize) -> String {
    if text.len() <= limit {
        return text;
    }
    let mut start = text.len() - limit;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("[truncated] {}", &text[start..])
}

fn floor_char_boundary(text: &str, mut index: usize) -> usize {
    while !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

/// An error message or reason from a guest, bounded.
pub fn message(text: String) -> String {
    head(text, MESSAGE_LIMIT)
}

/// A reply with every guest-controlled field bounded.
pub(crate) fn reply(reply: Reply) -> Reply {
    match reply {
        Reply::Outcome(outcome, said) => Reply::Outcome(
            types::Outcome {
                status: match outcome.status {
                    types::Status::Completed => types::Status::Completed,
                    types::Status::Failed(reason) => types::Status::Failed(message(reason)),
                    types::Status::Blocked(blocker) => types::Status::Blocked(message(blocker)),
                    types::Status::TimedOut(reason) => types::Status::TimedOut(message(reason)),
                },
                summary: outcome.summary.map(|s| head(s, SUMMARY_LIMIT)),
                detail: tail(outcome.detail, DETAIL_LIMIT),
                harness_session: outcome.harness_session.map(|s| head(s, SESSION_LIMIT)),
                decision: outcome.decision.map(|decision| match decision {
                    types::Decision::Allow => types::Decision::Allow,
                    types::Decision::Deny(reason) => types::Decision::Deny(message(reason)),
                    // A patch cut short is no longer JSON: the caller rejects it as such.
                    types::Decision::Patch(patch) => {
                        types::Decision::Patch(head(patch, PATCH_LIMIT))
                    }
                }),
            },
            said,
        ),
        other => other,
    }
}

/// One log line as the daemon writes it: at most [`LOG_LINE_LIMIT`] bytes, every control
/// character (newline, carriage return, escape) shown as an escape sequence.
pub fn log_line(text: &str) -> String {
    let mut line = String::with_capacity(text.len().min(LOG_LINE_LIMIT) + 16);
    for c in text.chars() {
        if line.len() >= LOG_LINE_LIMIT {
            line.push_str(" [truncated]");
            break;
        }
        if c.is_control() {
            line.extend(c.escape_default());
        } else {
            line.push(c);
        }
    }
    line
}

/// A token bucket for one call's log lines: a burst of [`LOG_BURST`], then [`LOG_PER_SECOND`].
#[derive(Debug)]
pub struct LogBudget {
    tokens: f64,
    refilled: Instant,
    dropped: u64,
}

impl Default for LogBudget {
    fn default() -> Self {
        Self {
            tokens: f64::from(LOG_BURST),
            refilled: Instant::now(),
            dropped: 0,
        }
    }
}

impl LogBudget {
    /// Whether one more line may be logged now; counts the ones that may not.
    pub fn admit(&mut self) -> bool {
        let now = Instant::now();
        let earned = now.duration_since(self.refilled).as_secs_f64() * f64::from(LOG_PER_SECOND);
        self.tokens = (self.tokens + earned).min(f64::from(LOG_BURST));
        self.refilled = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            self.dropped += 1;
            false
        }
    }

    /// Lines refused so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_cannot_break_the_line_or_carry_escapes() {
        let line = log_line("ok\n2026-01-01 INFO canopy daemon listening\x1b[2K\r");
        assert!(!line.contains('\n') && !line.contains('\r') && !line.contains('\x1b'));
        assert_eq!(
            line,
            "ok\\n2026-01-01 INFO canopy daemon listening\\u{1b}[2K\\r"
        );
        let long = log_line(&"é".repeat(LOG_LINE_LIMIT));
        assert!(long.len() <= LOG_LINE_LIMIT + 20, "{}", long.len());
        assert!(long.ends_with("[truncated]"));
    }

    #[test]
    fn head_and_tail_cut_on_character_boundaries() {
        assert_eq!(head("short".into(), 10), "short");
        assert_eq!(head("ééé".into(), 3), "é [truncated]");
        assert_eq!(tail("ééé".into(), 3), "[truncated] é");
        assert_eq!(tail("abcdef".into(), 2), "[truncated] ef");
    }

    #[test]
    fn the_log_budget_refuses_a_flood_and_counts_it() {
        let mut budget = LogBudget::default();
        let admitted = (0..1000).filter(|_| budget.admit()).count();
        assert!(
            admitted >= LOG_BURST as usize && admitted < LOG_BURST as usize + 20,
            "{admitted}"
        );
        assert_eq!(budget.dropped(), 1000 - admitted as u64);
    }
}
