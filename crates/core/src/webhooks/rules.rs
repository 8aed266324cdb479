//! A hook's trigger rules (`match`) and the request fields they, `pass_env`, `title_from` and
//! `body_from` read.
//!
//! ```toml
//! match = { ref = "refs/heads/main" }                       # a JSON body field (dotted for nested)
//! match = { "header.x-github-event" = "push", "query.env" = "prod*" }
//! match = { any = [{ ref = "refs/heads/main" }, { ref = "re:^refs/tags/v" }], not = { "sender.login" = "bot-*" } }
//! match = { action = ["opened", "reopened"] }               # one of several
//! ```
//!
//! Every key of a table must hold; `all` (a list of tables: each holds), `any` (one holds) and
//! `not` (a table that must not hold) nest. A pattern is exact text, a glob (`*`, `?`, `[`), or
//! `re:` and a regex; numbers and booleans compare as their text. A field that is absent never
//! matches.

use canopy_model::pattern::Pattern;
use http::HeaderMap;
use serde_json::Value;

/// Where a field is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldPath {
    /// A JSON body field: its dotted path (`head_commit.id`; a number indexes a list).
    Body(Vec<String>),
    /// A request header (lowercase name).
    Header(String),
    /// A query-string parameter.
    Query(String),
}

impl std::fmt::Display for FieldPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Body(parts) => write!(f, "{}", parts.join(".")),
            Self::Header(name) => write!(f, "header.{name}"),
            Self::Query(name) => write!(f, "query.{name}"),
        }
    }
}

/// What the rules and field paths read of a request.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The body parsed as JSON, when it is JSON.
    pub json: Option<&'a Value>,
    pub headers: &'a HeaderMap,
    pub query: &'a [(String, String)],
}

impl FieldPath {
    /// `header.NAME`, `query.NAME`, `body.a.b` or `a.b` (a body field).
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Some(name) = text.strip_prefix("header.") {
            let lower = name.to_ascii_lowercase();
            if super::config::AUTH_HEADERS.contains(&lower.as_str()) {
                return Err(format!(
                    "header `{name}` carries credentials; rules never read it"
                ));
            }
            if http::HeaderName::from_bytes(lower.as_bytes()).is_err() {
                return Err(format!("`{name}` is not a header name"));
            }
            return Ok(Self::Header(lower));
        }
        if let Some(name) = text.strip_prefix("query.") {
            if name.is_empty() {
                return Err("`query.` names no parameter".to_string());
            }
            return Ok(Self::Query(name.to_string()));
        }
        let body = text.strip_prefix("body.").unwrap_or(text);
        let parts: Vec<String> = body.split('.').map(str::to_string).collect();
        if parts.iter().any(String::is_empty) {
            return Err(format!(
                "`{text}` is not a field path (`ref`, `head_commit.id`, `header.x-github-event`, `query.env`)"
            ));
        }
        Ok(Self::Body(parts))
    }

    /// Whether the field is a header or query parameter whose name looks like a credential.
    pub fn looks_secret(&self) -> bool {
        match self {
            Self::Header(name) | Self::Query(name) => super::auth::looks_secret(name),
            Self::Body(_) => false,
        }
    }

    /// The field's value in a request: text as is, numbers and booleans as their text, a
    /// nested object or list as JSON.
    pub fn get(&self, request: &Request<'_>) -> Option<String> {
        match self {
            Self::Header(name) => request
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
            Self::Query(name) => request
                .query
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone()),
            Self::Body(parts) => {
                let mut value = request.json?;
                for part in parts {
                    value = match value {
                        Value::Array(items) => items.get(part.parse::<usize>().ok()?)?,
                        other => other.get(part)?,
                    };
                }
                match value {
                    Value::String(s) => Some(s.clone()),
                    Value::Null => None,
                    Value::Bool(_) | Value::Number(_) => Some(value.to_string()),
                    Value::Array(_) | Value::Object(_) => Some(value.to_string()),
                }
            }
        }
    }
}

/// A hook's trigger rules.
#[derive(Debug, Clone)]
pub enum Rule {
    /// Every one holds.
    All(Vec<Rule>),
    /// At least one holds.
    Any(Vec<Rule>),
    /// It does not hold.
    Not(Box<Rule>),
    /// The field is present and matches one of the patterns.
    Field(FieldPath, Vec<Pattern>),
}

/// Longest field value quoted in a reason.
const QUOTE_LIMIT: usize = 80;

fn quoted(value: &str) -> String {
    if value.chars().count() <= QUOTE_LIMIT {
        format!("`{value}`")
    } else {
        let head: String = value.chars().take(QUOTE_LIMIT).collect();
        format!("`{head}...`")
    }
}

impl Rule {
    /// Parses a `match` table; an error starts with the path inside it (`.ref: ...`).
    pub fn parse(value: &Value) -> Result<Self, String> {
        let Value::Object(table) = value else {
            return Err(": must be a table of field = pattern (with all, any, not)".to_string());
        };
        let mut rules = Vec::new();
        for (key, value) in table {
            let nested = |err: String| format!(".{key}{err}");
            match key.as_str() {
                "all" | "any" => {
                    let Value::Array(items) = value else {
                        return Err(format!(".{key}: must be a list of tables"));
                    };
                    let mut inner = Vec::new();
                    for (i, item) in items.iter().enumerate() {
                        inner.push(Self::parse(item).map_err(|e| format!(".{key}[{i}]{e}"))?);
                    }
                    rules.push(if key == "all" {
                        Self::All(inner)
                    } else {
                        Self::Any(inner)
                    });
                }
                "not" => rules.push(Self::Not(Box::new(Self::parse(value).map_err(nested)?))),
                field => {
                    let path = FieldPath::parse(field).map_err(|e| format!(".{key}: {e}"))?;
                    let patterns = match value {
                        Value::Array(items) if !items.is_empty() => items
                            .iter()
                            .map(Pattern::parse)
                            .collect::<Result<Vec<_>, _>>(),
                        Value::String(_) | Value::Number(_) | Value::Bool(_) => {
                            Pattern::parse(value).map(|p| vec![p])
                        }
                        _ => Err("must be a string (exact, a glob, or `re:` and a regex), a number, a boolean, or a list of them".to_string()),
                    }
                    .map_err(|e| format!(".{key}: {e}"))?;
                    rules.push(Self::Field(path, patterns));
                }
            }
        }
        Ok(Self::All(rules))
    }

    /// The headers the rules read (lowercase names).
    pub fn header_names(&self) -> Vec<&str> {
        let mut names = Vec::new();
        self.collect_headers(&mut names);
        names
    }

    fn collect_headers<'a>(&'a self, into: &mut Vec<&'a str>) {
        match self {
            Self::All(rules) | Self::Any(rules) => {
                rules.iter().for_each(|rule| rule.collect_headers(into));
            }
            Self::Not(rule) => rule.collect_headers(into),
            Self::Field(FieldPath::Header(name), _) => {
                if !into.contains(&name.as_str()) {
                    into.push(name);
                }
            }
            Self::Field(FieldPath::Query(_) | FieldPath::Body(_), _) => {}
        }
    }

    /// Ok when the request passes; else why not, in a sentence.
    pub fn check(&self, request: &Request<'_>) -> Result<(), String> {
        match self {
            Self::All(rules) => rules.iter().try_for_each(|r| r.check(request)),
            Self::Any(rules) => {
                let mut reasons = Vec::new();
                for rule in rules {
                    match rule.check(request) {
                        Ok(()) => return Ok(()),
                        Err(reason) => reasons.push(reason),
                    }
                }
                Err(format!("none of `any` holds ({})", reasons.join("; ")))
            }
            Self::Not(rule) => match rule.check(request) {
                Ok(()) => Err("a `not` rule holds".to_string()),
                Err(_) => Ok(()),
            },
            Self::Field(path, patterns) => match path.get(request) {
                None if matches!(path, FieldPath::Body(_)) && request.json.is_none() => {
                    Err(format!("`{path}` cannot be read: the body is not JSON"))
                }
                None => Err(format!("`{path}` is missing")),
                Some(value) if patterns.iter().any(|p| p.matches(&value)) => Ok(()),
                // A reason is recorded, answered and put in the feed: it never quotes what the
                // rule expects (it may be a secret), nor a value sent in a credential's place.
                Some(_) if path.looks_secret() => Err(format!(
                    "`{path}` does not match this hook's rule (its value is not shown: the name looks like a credential)"
                )),
                Some(value) => Err(format!(
                    "`{path}` is {}, which does not match this hook's rule",
                    quoted(&value)
                )),
            },
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_body_that_is_not_json_is_said_so() {
        let rule = Rule::parse(&serde_json::json!({ "ref": "refs/heads/main" })).unwrap();
        let headers = HeaderMap::new();
        let reason = rule.check(&Request {
            json: None,
            headers: &headers,
            query: &[],
        });
        assert_eq!(
            reason,
            Err("`ref` cannot be read: the body is not JSON".to_string())
        );
    }

    fn check(
        rule: Value,
        body: Value,
        headers: &[(&str, &str)],
        query: &[(&str, &str)],
    ) -> Result<(), String> {
        let rule = Rule::parse(&rule).unwrap();
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        let query: Vec<(String, String)> = query
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        rule.check(&Request {
            json: Some(&body),
            headers: &map,
            query: &query,
        })
    }

    #[test]
    fn body_header_and_query_fields_with_all_any_and_not() {
        let push =
            serde_json::json!({ "ref": "refs/heads/main", "sender": { "login": "ann" }, "n": 3 });
        let rule = serde_json::json!({
            "ref": "refs/heads/main",
            "header.X-GitHub-Event": "push",
            "any": [{ "query.env": "prod*" }, { "n": 3 }],
            "not": { "sender.login": "bot-*" },
        });
        assert_eq!(
            check(
                rule.clone(),
                push.clone(),
                &[("x-github-event", "push")],
                &[]
            ),
            Ok(())
        );
        let dev = serde_json::json!({ "ref": "refs/heads/dev", "n": 3 });
        assert_eq!(
            check(rule.clone(), dev, &[("x-github-event", "push")], &[]),
            Err("`ref` is `refs/heads/dev`, which does not match this hook's rule".to_string())
        );
        let bot =
            serde_json::json!({ "ref": "refs/heads/main", "sender": { "login": "bot-1" }, "n": 3 });
        assert!(check(rule.clone(), bot, &[("x-github-event", "push")], &[]).is_err());
        assert_eq!(
            check(rule, push, &[], &[]),
            Err("`header.x-github-event` is missing".to_string())
        );
        let tags = serde_json::json!({ "ref": ["re:^refs/tags/v", "refs/heads/main"] });
        assert_eq!(
            check(
                tags.clone(),
                serde_json::json!({ "ref": "refs/tags/v1" }),
                &[],
                &[]
            ),
            Ok(())
        );
        assert!(check(tags, serde_json::json!({ "ref": "refs/tags/x" }), &[], &[]).is_err());
    }

    #[test]
    fn auth_headers_are_never_read_by_rules() {
        let err = Rule::parse(&serde_json::json!({ "header.Authorization": "x" })).unwrap_err();
        assert!(
            err.starts_with(".header.Authorization: header `Authorization` carries credentials"),
            "{err}"
        );
    }
}
