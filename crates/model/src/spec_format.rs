//! The spec body format: a `<spec>` element holding exactly the seven section tags, markdown
//! inside each. A body that does not parse is refused with the offending tag named; the older
//! heading format (`## Objective` ...) is recognised so existing specs stay readable and can be
//! flagged as needing conversion.

use std::fmt;

/// The seven sections, in canonical order.
pub const SECTIONS: [&str; 7] = [
    "objective",
    "functional_requirements",
    "non_functional_requirements",
    "constraints",
    "guidelines",
    "in_scope",
    "out_of_scope",
];

/// What is wrong with a tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    Missing,
    Duplicated,
    Unclosed,
    Unknown,
    OutOfPlace,
}

/// A body that does not parse, naming the tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecFormatError {
    pub tag: String,
    pub problem: Problem,
    pub detail: String,
}

impl fmt::Display for SpecFormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = &self.tag;
        match self.problem {
            Problem::Missing => write!(f, "spec body: missing tag <{tag}>")?,
            Problem::Duplicated => write!(f, "spec body: duplicated tag <{tag}>")?,
            Problem::Unclosed => write!(f, "spec body: unclosed tag <{tag}> (no </{tag}>)")?,
            Problem::Unknown => write!(f, "spec body: unknown tag <{tag}>")?,
            Problem::OutOfPlace => write!(f, "spec body: tag <{tag}> is out of place")?,
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        if matches!(self.problem, Problem::Missing | Problem::Unknown) {
            write!(f, "; a spec is <spec> holding <{}>", SECTIONS.join(">, <"))?;
        }
        Ok(())
    }
}

impl std::error::Error for SpecFormatError {}

/// How a stored body reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecFormat {
    /// The tagged format: section name → markdown, in canonical order.
    Tagged(Vec<(&'static str, String)>),
    /// The older heading format: readable, needs converting by hand.
    Heading,
}

fn error(tag: &str, problem: Problem, detail: impl Into<String>) -> SpecFormatError {
    SpecFormatError {
        tag: tag.to_string(),
        problem,
        detail: detail.into(),
    }
}

/// Parses a tagged body; the error names the first offending tag.
pub fn parse(body: &str) -> Result<Vec<(&'static str, String)>, SpecFormatError> {
    let text = body.trim();
    let Some(after_open) = text.strip_prefix("<spec>") else {
        return Err(match text.find("<spec>") {
            Some(_) => error(
                "spec",
                Problem::OutOfPlace,
                "text comes before <spec>; the body must start with it",
            ),
            None => error(
                "spec",
                Problem::Missing,
                "the body must be wrapped in <spec> ... </spec>",
            ),
        });
    };
    let Some(close) = after_open.rfind("</spec>") else {
        return Err(error("spec", Problem::Unclosed, ""));
    };
    if !after_open[close + "</spec>".len()..].trim().is_empty() {
        return Err(error(
            "spec",
            Problem::OutOfPlace,
            "text comes after </spec>",
        ));
    }
    let mut inner = &after_open[..close];
    let mut found: Vec<(&'static str, String)> = Vec::new();
    loop {
        inner = inner.trim_start();
        if inner.is_empty() {
            break;
        }
        if !inner.starts_with('<') {
            let snippet: String = inner.chars().take(40).collect();
            return Err(error(
                "spec",
                Problem::OutOfPlace,
                format!("text outside any section: `{snippet}`"),
            ));
        }
        let Some(end) = inner.find('>') else {
            return Err(error(
                "spec",
                Problem::Unclosed,
                "a tag is not closed with `>`",
            ));
        };
        let name = &inner[1..end];
        if let Some(closing) = name.strip_prefix('/') {
            return Err(error(
                closing,
                Problem::OutOfPlace,
                format!("</{closing}> closes a tag that is not open"),
            ));
        }
        if name == "spec" {
            return Err(error("spec", Problem::OutOfPlace, "<spec> inside <spec>"));
        }
        let Some(section) = SECTIONS.iter().copied().find(|s| *s == name) else {
            return Err(error(name, Problem::Unknown, ""));
        };
        if found.iter().any(|(s, _)| *s == section) {
            return Err(error(section, Problem::Duplicated, ""));
        }
        let rest = &inner[end + 1..];
        let closing = format!("</{section}>");
        let Some(content_end) = rest.find(&closing) else {
            return Err(error(section, Problem::Unclosed, ""));
        };
        let content = &rest[..content_end];
        for other in SECTIONS.iter().chain(std::iter::once(&"spec")) {
            if content.contains(&format!("<{other}>")) {
                return Err(error(
                    other,
                    Problem::OutOfPlace,
                    format!("inside <{section}>"),
                ));
            }
        }
        found.push((section, content.trim().to_string()));
        inner = &rest[content_end + closing.len()..];
    }
    if let Some(missing) = SECTIONS
        .iter()
        .find(|s| !found.iter().any(|(f, _)| f == *s))
    {
        return Err(error(missing, Problem::Missing, ""));
    }
    found.sort_by_key(|(s, _)| SECTIONS.iter().position(|x| x == s));
    Ok(found)
}

/// True when the body is in the older heading format (`## Objective`, `## Constraints`, ...).
pub fn is_heading_format(body: &str) -> bool {
    !body.contains("<spec>")
        && body.lines().any(|line| {
            let line = line.trim();
            let title = line.trim_start_matches('#');
            line.starts_with('#')
                && SECTIONS
                    .iter()
                    .any(|s| s.replace('_', " ").eq_ignore_ascii_case(title.trim()))
        })
}

/// Reads a stored body: tagged, or heading format (needs conversion).
pub fn read(body: &str) -> Result<SpecFormat, SpecFormatError> {
    match parse(body) {
        Ok(sections) => Ok(SpecFormat::Tagged(sections)),
        Err(_) if is_heading_format(body) => Ok(SpecFormat::Heading),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body_with(sections: &[(&str, &str)]) -> String {
        let mut body = "<spec>\n".to_string();
        for (tag, text) in sections {
            body.push_str(&format!("<{tag}>\n{text}\n</{tag}>\n"));
        }
        body.push_str("</spec>\n");
        body
    }

    fn all() -> Vec<(&'static str, &'static str)> {
        SECTIONS.iter().map(|s| (*s, "- some *markdown*")).collect()
    }

    #[test]
    fn a_full_body_parses_into_its_seven_sections() {
        let sections = parse(&body_with(&all())).map_err(|e| e.to_string());
        assert_eq!(sections.map(|s| s.len()), Ok(7));
    }

    #[test]
    fn each_failure_names_its_tag() {
        let mut missing = all();
        missing.retain(|(s, _)| *s != "guidelines");
        assert_eq!(
            parse(&body_with(&missing))
                .err()
                .map(|e| (e.tag, e.problem)),
            Some(("guidelines".into(), Problem::Missing))
        );

        let mut duplicated = all();
        duplicated.push(("objective", "again"));
        assert_eq!(
            parse(&body_with(&duplicated))
                .err()
                .map(|e| (e.tag, e.problem)),
            Some(("objective".into(), Problem::Duplicated))
        );

        let mut unknown = all();
        unknown.insert(2, ("notes", "x"));
        assert_eq!(
            parse(&body_with(&unknown))
                .err()
                .map(|e| (e.tag, e.problem)),
            Some(("notes".into(), Problem::Unknown))
        );

        let unclosed = body_with(&all()).replace("</constraints>", "");
        assert_eq!(
            parse(&unclosed).err().map(|e| (e.tag, e.problem)),
            Some(("constraints".into(), Problem::Unclosed))
        );

        let nested = body_with(&all()).replace(
            "<in_scope>\n- some",
            "<in_scope>\n<objective>x</objective>\n- some",
        );
        assert_eq!(
            parse(&nested).err().map(|e| (e.tag, e.problem)),
            Some(("objective".into(), Problem::OutOfPlace))
        );
    }

    #[test]
    fn heading_format_is_recognised_not_parsed() {
        let body = "## Objective\nShip it\n\n## Constraints\nNone\n";
        assert!(parse(body).is_err());
        assert_eq!(read(body), Ok(SpecFormat::Heading));
    }
}
