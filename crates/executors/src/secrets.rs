//! The values this daemon knows are secret, and the one place they are masked.
//!
//! A process's output is recorded (hook runs, deliveries, receipts) and emitted (`*.failed`
//! events reach every feed reader and any hook forwarding `{{error}}`). A handler that fails
//! after `curl -v` prints `Authorization: Bearer <daemon token>`; a cron echoing a `pass_env`
//! value prints it. So every output a plugin call returns passes through [`mask`] before anyone
//! sees it, and each known secret becomes `[masked]`:
//!
//! - the daemon's API token ([`register`]ed at start);
//! - the values of `[process] pass_env` (they are for the processes, not for the record);
//! - webhook tokens and HMAC secrets, each value as it is read (a rotated one too);
//! - a call's own token (`CANOPY_CALL_TOKEN`), masked in that call's outputs.
//!
//! Values shorter than [`MIN_LEN`] are not masked: a `pass_env` of `1` or `en_US` would
//! blank out every such character in the record, and carries no secret.

use std::borrow::Cow;
use std::sync::{PoisonError, RwLock};

/// What a masked secret reads as.
pub const MASK: &str = "[masked]";

/// The shortest value masked.
pub const MIN_LEN: usize = 8;

static KNOWN: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Adds a secret (ignored when shorter than [`MIN_LEN`] or known already).
pub fn register(value: &str) {
    let value = value.trim();
    if value.len() < MIN_LEN
        || KNOWN
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|k| k == value)
    {
        return;
    }
    let mut known = KNOWN.write().unwrap_or_else(PoisonError::into_inner);
    if !known.iter().any(|k| k == value) {
        known.push(value.to_string());
        // The longest first, so a secret holding another is masked whole.
        known.sort_by_key(|k| std::cmp::Reverse(k.len()));
    }
}

/// `text` with every known secret, and each of `also` (at least [`MIN_LEN`] long), replaced by
/// [`MASK`].
pub fn mask<'a>(text: &'a str, also: &[&str]) -> Cow<'a, str> {
    let known = KNOWN.read().unwrap_or_else(PoisonError::into_inner);
    let mut out = Cow::Borrowed(text);
    for secret in known
        .iter()
        .map(String::as_str)
        .chain(also.iter().copied().filter(|s| s.len() >= MIN_LEN))
    {
        if out.contains(secret) {
            out = Cow::Owned(out.replace(secret, MASK));
        }
    }
    out
}

/// [`mask`] of an owned string, without a copy when nothing is masked.
pub fn mask_owned(text: String, also: &[&str]) -> String {
    match mask(&text, also) {
        Cow::Borrowed(_) => text,
        Cow::Owned(masked) => masked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_secrets_and_a_calls_own_are_masked_and_short_values_are_not() {
        register("daemon-token-0123456789abcdef");
        register("short");
        let text = "Authorization: Bearer daemon-token-0123456789abcdef; call canopy-call-ffff0000ffff0000; lang short";
        assert_eq!(
            mask(text, &["canopy-call-ffff0000ffff0000", "tiny"]),
            "Authorization: Bearer [masked]; call [masked]; lang short"
        );
        assert!(matches!(mask("nothing here", &[]), Cow::Borrowed(_)));
    }
}
