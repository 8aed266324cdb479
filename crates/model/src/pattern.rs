//! The one matcher of configured values: exact text, a glob (`web-*`) or a regex (`re:^web`).
//! Daemon hooks' `match` fields and webhook rules compare with it.

use serde_json::Value;

/// How one configured field is compared.
#[derive(Debug, Clone)]
pub enum Pattern {
    Exact(String),
    /// The glob as written, and compiled.
    Glob(String, globset::GlobMatcher),
    Regex(regex::Regex),
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exact(text) | Self::Glob(text, _) => f.write_str(text),
            Self::Regex(regex) => write!(f, "re:{}", regex.as_str()),
        }
    }
}

/// The largest compiled regex a pattern may make.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

impl Pattern {
    /// A string (exact; a glob when it holds `*`, `?` or `[`; a regex after `re:`), a number
    /// or a boolean (compared as their text). The error says what is wrong, for the caller to
    /// prefix with the field.
    pub fn parse(value: &Value) -> Result<Self, String> {
        let text = match value {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            _ => {
                return Err(
                    "must be a string (exact, a glob, or `re:` and a regex), a number or a boolean"
                        .to_string(),
                );
            }
        };
        if let Some(pattern) = text.strip_prefix("re:") {
            return regex::RegexBuilder::new(pattern)
                .size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map(Self::Regex)
                .map_err(|err| format!("`{pattern}` is not a valid regex: {err}"));
        }
        Self::glob_or_exact(&text, &['*', '?', '['])
    }

    /// `text` as a glob when it holds one of `glob_chars`, else as exact text (no `re:`): an
    /// event pattern (`spec.*`, `graph.run.{completed,failed}`).
    pub fn glob_or_exact(text: &str, glob_chars: &[char]) -> Result<Self, String> {
        if text.contains(glob_chars) {
            return globset::GlobBuilder::new(text)
                .literal_separator(false)
                .build()
                .map(|g| Self::Glob(text.to_string(), g.compile_matcher()))
                .map_err(|err| format!("`{text}` is not a valid glob: {err}"));
        }
        Ok(Self::Exact(text.to_string()))
    }

    /// Whether `value` matches.
    pub fn matches(&self, value: &str) -> bool {
        match self {
            Self::Exact(text) => text == value,
            Self::Glob(_, glob) => glob.is_match(value),
            Self::Regex(regex) => regex.is_match(value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn exact_glob_and_regex_patterns_match_what_they_say() {
        let exact = Pattern::parse(&json!("web")).unwrap_or_else(|e| panic!("{e}"));
        assert!(exact.matches("web") && !exact.matches("web-1"));
        let glob = Pattern::parse(&json!("web-*")).unwrap_or_else(|e| panic!("{e}"));
        assert!(glob.matches("web-1") && glob.matches("web-a/b") && !glob.matches("api"));
        let regex = Pattern::parse(&json!("re:^dirty")).unwrap_or_else(|e| panic!("{e}"));
        assert!(regex.matches("dirty tree") && !regex.matches("a dirty tree"));
        let number = Pattern::parse(&json!(7)).unwrap_or_else(|e| panic!("{e}"));
        assert!(number.matches("7"));
        assert_eq!(regex.to_string(), "re:^dirty");
        assert_eq!(glob.to_string(), "web-*");
        assert!(Pattern::parse(&json!("re:(")).is_err());
        assert!(Pattern::parse(&json!({})).is_err());
    }
}
