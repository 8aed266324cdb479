//! A request's credentials: the hook's bearer token (`Authorization: Bearer` or
//! `X-Canopy-Hook-Token`, compared in constant time) and, when the hook has a sender's secret,
//! the signature its [`Provider`] puts on the raw body: GitHub's `X-Hub-Signature-256`, GitLab's
//! `X-Gitlab-Token`, Slack's `v0` and Stripe's timestamped `v1` signatures. A hook with
//! `auth = "signature"` needs no token: a valid signature authenticates it. Secrets are read
//! per request and never logged; a failure is logged with what failed (never a secret) and
//! answered 401 alone.

use std::fmt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use http::HeaderMap;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::config::{Hook, Provider, Secret};
use canopy_model::records::webhooks::AuthMode;

/// The header a token may be sent in instead of `Authorization: Bearer`.
pub const TOKEN_HEADER: &str = "x-canopy-hook-token";
/// GitHub's signature header: `sha256=` and the hex HMAC-SHA256 of the body.
pub const SIGNATURE_HEADER: &str = "x-hub-signature-256";
/// How far a timestamped signature (Slack, Stripe) may be from now: both senders document five
/// minutes, past which a captured request cannot be replayed.
pub const TIMESTAMP_TOLERANCE: Duration = Duration::from_secs(300);

/// The most `v1` signatures a `Stripe-Signature` may carry (see [`check_signature`]).
const MAX_STRIPE_SIGNATURES: usize = 4;

/// Why a request was refused (for the log; the client sees 401 only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    NoToken,
    WrongToken,
    /// The hook's secret could not be read (a missing file, an unset variable).
    SecretUnreadable,
    /// The provider's signature header is missing.
    NoSignature(&'static str),
    /// It is there but does not match the body (or is not in the provider's format).
    BadSignature(&'static str),
    /// Its timestamp is further from now than [`TIMESTAMP_TOLERANCE`] (a replay, or a clock off).
    StaleSignature(&'static str),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoToken => f.write_str("no token presented"),
            Self::WrongToken => f.write_str("wrong token"),
            Self::SecretUnreadable => f.write_str("the hook's secret cannot be read"),
            Self::NoSignature(header) => write!(f, "no {header}"),
            Self::BadSignature(header) => write!(f, "the {header} does not match the body"),
            Self::StaleSignature(header) => write!(
                f,
                "the {header} is signed more than {} s from now (a replay, or a clock off)",
                TIMESTAMP_TOLERANCE.as_secs()
            ),
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

/// Checks the token (headers only, before the body is read). A hook authenticated by its
/// signature alone (`auth = "signature"`) needs none.
pub fn check_token(hook: &Hook, headers: &HeaderMap, base: &Path) -> Result<(), Refusal> {
    if hook.auth == AuthMode::Signature {
        return Ok(());
    }
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

/// Checks the body's signature as the hook's provider makes it, when the hook has a sender's
/// secret.
pub fn check_signature(
    hook: &Hook,
    headers: &HeaderMap,
    body: &[u8],
    base: &Path,
) -> Result<(), Refusal> {
    let Some(secret) = &hook.hmac else {
        return Ok(());
    };
    let header = hook.provider.signature_header();
    let Some(value) = headers.get(header) else {
        return Err(Refusal::NoSignature(header));
    };
    let value = value
        .to_str()
        .map_err(|_| Refusal::BadSignature(header))?
        .trim();
    let key = read_secret(hook, secret, base)?;
    match hook.provider {
        Provider::Github => {
            let hex_text = value
                .strip_prefix("sha256=")
                .ok_or(Refusal::BadSignature(header))?;
            let claimed = hex::decode(hex_text).map_err(|_| Refusal::BadSignature(header))?;
            verify(&key, &[body], &claimed).map_err(|()| Refusal::BadSignature(header))
        }
        // GitLab sends the secret itself.
        Provider::Gitlab => {
            if bool::from(value.as_bytes().ct_eq(&key)) {
                Ok(())
            } else {
                Err(Refusal::BadSignature(header))
            }
        }
        // `v0=` HMAC of `v0:<X-Slack-Request-Timestamp>:<body>`.
        Provider::Slack => {
            let stamp_header = "x-slack-request-timestamp";
            let stamp = headers
                .get(stamp_header)
                .and_then(|v| v.to_str().ok())
                .ok_or(Refusal::NoSignature(stamp_header))?
                .trim();
            fresh(stamp, header)?;
            let hex_text = value
                .strip_prefix("v0=")
                .ok_or(Refusal::BadSignature(header))?;
            let claimed = hex::decode(hex_text).map_err(|_| Refusal::BadSignature(header))?;
            let prefix = format!("v0:{stamp}:");
            verify(&key, &[prefix.as_bytes(), body], &claimed)
                .map_err(|()| Refusal::BadSignature(header))
        }
        // `t=<timestamp>,v1=<hex>[,v1=<hex>...]`, each `v1` an HMAC of `<t>.<body>`.
        Provider::Stripe => {
            let mut stamp = None;
            let mut claims = Vec::new();
            for part in value.split(',') {
                match part.trim().split_once('=') {
                    Some(("t", t)) => stamp = Some(t),
                    Some(("v1", hex_text)) => claims.push(hex_text),
                    _ => {}
                }
            }
            let stamp = stamp.ok_or(Refusal::BadSignature(header))?;
            fresh(stamp, header)?;
            // Stripe sends one `v1` per active secret (two while one is rolled). Each costs an
            // HMAC of the whole body: a header stuffed with thousands would make one request
            // hash gigabytes, so only the first few are tried.
            if claims.len() > MAX_STRIPE_SIGNATURES {
                return Err(Refusal::BadSignature(header));
            }
            let prefix = format!("{stamp}.");
            let matched = claims.iter().any(|hex_text| {
                hex::decode(hex_text)
                    .is_ok_and(|claimed| verify(&key, &[prefix.as_bytes(), body], &claimed).is_ok())
            });
            if matched {
                Ok(())
            } else {
                Err(Refusal::BadSignature(header))
            }
        }
    }
}

/// Whether a sender's Unix timestamp is within [`TIMESTAMP_TOLERANCE`] of now.
fn fresh(stamp: &str, header: &'static str) -> Result<(), Refusal> {
    let signed: u64 = stamp.parse().map_err(|_| Refusal::BadSignature(header))?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if now.abs_diff(signed) > TIMESTAMP_TOLERANCE.as_secs() {
        return Err(Refusal::StaleSignature(header));
    }
    Ok(())
}

/// Whether `claimed` is the HMAC-SHA256 of `parts` (one after another) under `key`, compared
/// in constant time.
fn verify(key: &[u8], parts: &[&[u8]], claimed: &[u8]) -> Result<(), ()> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).map_err(|_| ())?;
    for part in parts {
        mac.update(part);
    }
    mac.verify_slice(claimed).map_err(|_| ())
}

/// The hex HMAC-SHA256 of `parts` under `key`: what a sender signs with.
pub fn hmac_hex(key: &[u8], parts: &[&[u8]]) -> String {
    match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mut mac) => {
            for part in parts {
                mac.update(part);
            }
            hex::encode(mac.finalize().into_bytes())
        }
        Err(_) => String::new(),
    }
}

/// `sha256=<hex>` of a body: what GitHub puts in `X-Hub-Signature-256`.
pub fn sign(key: &[u8], body: &[u8]) -> String {
    format!("sha256={}", hmac_hex(key, &[body]))
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
    fn a_stripe_header_stuffed_with_signatures_is_refused_without_hashing_them_all() {
        use super::super::config::Webhooks;
        use crate::config::Config;
        let text = "[webhooks]\nbind_port = 0\n[webhooks.entries.s]\ntype = \"command\"\ncommand = \"true\"\nprovider = \"stripe\"\nauth = \"signature\"\nhmac_secret = \"whsec\"\n";
        let config = Config::parse(text).expect("a valid config");
        let webhooks: Webhooks = super::super::config::compile(&config).expect("it compiles");
        let hook = webhooks.hooks.values().next().expect("one hook");
        let body = b"{}";
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
            .to_string();
        let good = hmac_hex(b"whsec", &[format!("{stamp}.").as_bytes(), body]);
        let check = |value: String| {
            let mut headers = HeaderMap::new();
            headers.insert("stripe-signature", value.parse().expect("a header value"));
            check_signature(hook, &headers, body, Path::new("/"))
        };
        // As Stripe sends it, and while a secret is rolled (two v1).
        assert_eq!(check(format!("t={stamp},v1={good}")), Ok(()));
        assert_eq!(
            check(format!("t={stamp},v1={},v1={good}", "0".repeat(64))),
            Ok(())
        );
        // A thousand: refused, however one of them is right.
        let stuffed: Vec<String> = (0..1000)
            .map(|_| format!("v1={}", "0".repeat(64)))
            .collect();
        assert_eq!(
            check(format!("t={stamp},{},v1={good}", stuffed.join(","))),
            Err(Refusal::BadSignature("stripe-signature"))
        );
        // A signature from ten minutes ago is a replay.
        let old = (SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
            - 600)
            .to_string();
        let signed_then = hmac_hex(b"whsec", &[format!("{old}.").as_bytes(), body]);
        assert_eq!(
            check(format!("t={old},v1={signed_then}")),
            Err(Refusal::StaleSignature("stripe-signature"))
        );
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
            verify(b"It's a Secret to Everybody", &[b"Hello, World!"], &claimed),
            Ok(())
        );
        assert_eq!(
            verify(b"It's a Secret to Everybody", &[b"Hello, World?"], &claimed),
            Err(())
        );
    }
}
