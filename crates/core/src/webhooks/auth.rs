//! A request's credentials: the hook's bearer token (`Authorization: Bearer` or
//! `X-Canopy-Hook-Token`, compared in constant time) and, when the hook has an HMAC secret,
//! GitHub's `X-Hub-Signature-256` over the raw body. Secrets are read per request and never
//! logged; a failure is logged with what failed (never a secret) and answered 401 alone.

use std::path::Path;

use hmac::{Hmac, Mac};
use http::HeaderMap;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::config::{Hook, Secret};

/// The header a token may be sent in instead of `Authorization: Bearer`.
pub const TOKEN_HEADER: &str = "x-canopy-hook-token";
/// GitHub's signature header: `sha256=` and the hex HMAC-SHA256 of the body.
pub const SIGNATURE_HEADER: &str = "x-hub-signature-256";

/// Why a request was refused (for the log; the client sees 401 only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    NoToken,
    WrongToken,
    /// The hook's secret could not be read (a missing file, an unset variable).
    SecretUnreadable,
    NoSignature,
    BadSignature,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoToken => "no token presented",
            Self::WrongToken => "wrong token",
            Self::SecretUnreadable => "the hook's secret cannot be read",
            Self::NoSignature => "no X-Hub-Signature-256",
            Self::BadSignature => "the X-Hub-Signature-256 does not match the body",
        }
    }
}

fn read_secret(hook: &Hook, secret: &Secret, base: &Path) -> Result<Vec<u8>, Refusal> {
    secret.read(base).map_err(|err| {
        tracing::warn!(hook = %hook.key(), source = %secret.describe(), error = %err, "a webhook secret cannot be read; requests are refused until it can");
        Refusal::SecretUnreadable
    })
}

/// Query parameters whose values are kept out of the record: a name holding one of these
/// words (any case) looks like a credential. A token belongs in a header; one sent in the
/// query string as well (`?token=...`, as some senders do) is still never recorded.
const SECRET_WORDS: [&str; 8] = [
    "token",
    "secret",
    "passw",
    "signature",
    "sig",
    "key",
    "auth",
    "credential",
];

/// Whether a header or query parameter named `name` looks like it carries a credential
/// (`x-gitlab-token`, `x-api-key`, `api_key`): its value is never recorded or quoted.
pub fn looks_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_WORDS.iter().any(|word| name.contains(word))
}

/// The query string as a delivery records it (and hands to its handler as `{{query}}`): each
/// parameter whose name looks like a credential has its value replaced by `(redacted)`. The
/// hook's rules see the query as it came.
pub fn recorded_query(query: &str) -> String {
    if !form_urlencoded::parse(query.as_bytes()).any(|(name, _)| looks_secret(&name)) {
        return query.to_string();
    }
    let mut kept = form_urlencoded::Serializer::new(String::new());
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        if looks_secret(&name) {
            kept.append_pair(&name, "(redacted)");
        } else {
            kept.append_pair(&name, &value);
        }
    }
    kept.finish()
}

/// The tokens a request presents: the bearer token and the token header.
fn presented(headers: &HeaderMap) -> Vec<&[u8]> {
    let mut tokens = Vec::new();
    for value in headers.get_all(http::header::AUTHORIZATION) {
        let bytes = value.as_bytes();
        if bytes.len() > 7 && bytes[..7].eq_ignore_ascii_case(b"bearer ") {
            tokens.push(bytes[7..].trim_ascii());
        }
    }
    for value in headers.get_all(TOKEN_HEADER) {
        tokens.push(value.as_bytes().trim_ascii());
    }
    tokens
}

/// Checks the token (headers only, before the body is read).
pub fn check_token(hook: &Hook, headers: &HeaderMap, base: &Path) -> Result<(), Refusal> {
    let Some(secret) = &hook.token else {
        // Compile refuses a served hook without a token; refuse all the same.
        return Err(Refusal::SecretUnreadable);
    };
    let tokens = presented(headers);
    if tokens.is_empty() {
        return Err(Refusal::NoToken);
    }
    let expected = read_secret(hook, secret, base)?;
    let mut ok = subtle::Choice::from(0);
    for token in tokens {
        ok |= token.ct_eq(&expected);
    }
    if bool::from(ok) {
        Ok(())
    } else {
        Err(Refusal::WrongToken)
    }
}

/// Checks the body's signature, when the hook has an HMAC secret.
pub fn check_signature(
    hook: &Hook,
    headers: &HeaderMap,
    body: &[u8],
    base: &Path,
) -> Result<(), Refusal> {
    let Some(secret) = &hook.hmac else {
        return Ok(());
    };
    let Some(signature) = headers.get(SIGNATURE_HEADER) else {
        return Err(Refusal::NoSignature);
    };
    let hex_text = signature
        .to_str()
        .ok()
        .and_then(|s| s.trim().strip_prefix("sha256="))
        .ok_or(Refusal::BadSignature)?;
    let claimed = hex::decode(hex_text).map_err(|_| Refusal::BadSignature)?;
    let key = read_secret(hook, secret, base)?;
    verify(&key, body, &claimed)
}

/// Whether `claimed` is the HMAC-SHA256 of `body` under `key` (compared in constant time).
fn verify(key: &[u8], body: &[u8], claimed: &[u8]) -> Result<(), Refusal> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).map_err(|_| Refusal::SecretUnreadable)?;
    mac.update(body);
    mac.verify_slice(claimed).map_err(|_| Refusal::BadSignature)
}

/// `sha256=<hex>` of a body: what a sender puts in `X-Hub-Signature-256`.
pub fn sign(key: &[u8], body: &[u8]) -> String {
    match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mut mac) => {
            mac.update(body);
            format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
        }
        Err(_) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_the_query_are_not_recorded() {
        assert_eq!(recorded_query("x=1&ref=main"), "x=1&ref=main");
        assert_eq!(
            recorded_query("token=inline-SECRET&x=1&API_Key=k2&hub.signature=s&access_token=t"),
            "token=%28redacted%29&x=1&API_Key=%28redacted%29&hub.signature=%28redacted%29&access_token=%28redacted%29"
        );
        // Whatever the encoding, the secret does not survive.
        let kept = recorded_query("%74oken=inline%2DSECRET");
        assert!(
            !kept.contains("SECRET") && kept.contains("redacted"),
            "{kept}"
        );
        assert_eq!(recorded_query(""), "");
    }

    #[test]
    fn githubs_example_signature_verifies() {
        // The example in GitHub's "Validating webhook deliveries".
        let signature = sign(b"It's a Secret to Everybody", b"Hello, World!");
        assert_eq!(
            signature,
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        );
        let claimed = hex::decode(&signature["sha256=".len()..]).unwrap_or_default();
        assert_eq!(
            verify(b"It's a Secret to Everybody", b"Hello, World!", &claimed),
            Ok(())
        );
        assert_eq!(
            verify(b"It's a Secret to Everybody", b"Hello, World?", &claimed),
            Err(Refusal::BadSignature)
        );
    }
}
