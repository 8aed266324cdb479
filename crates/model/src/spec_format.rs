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
            Problem::Unknown => write!(
                f,
                "spec body: unknown tag <{tag}>{}",
                crate::text::closest(tag, SECTIONS)
                    .map(|near| format!(" (did you mean <{near}>?)"))
                    .unwrap_or_default()
            )?,
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

/// The section a heading names (`## Functional requirements`, `# In scope`), if it names one.
fn heading_section(line: &str) -> Option<&'static str> {
    let line = line.trim();
    if !line.starts_with('#') {
        return None;
    }
    let title = line.trim_start_matches('#').trim().trim_end_matches(':');
    let words = title.to_ascii_lowercase().replace(['-', '_'], " ");
    // `## Requirements` is how most people write the functional ones.
    if words == "requirements" {
        return Some("functional_requirements");
    }
    SECTIONS
        .iter()
        .copied()
        .find(|s| s.replace('_', " ") == words)
}

/// A body in the older heading format rewritten as a tagged `<spec>`: the text under each
/// section heading goes into its tag (in canonical order; a section with no heading is left
/// empty), and text before the first section heading (a title, say) goes at the top of the
/// objective. `None` when the body has no section heading, or is tagged already.
pub fn from_headings(body: &str) -> Option<String> {
    if !is_heading_format(body) {
        return None;
    }
    let mut preamble = String::new();
    let mut sections: Vec<(&'static str, String)> = Vec::new();
    for line in body.lines() {
        if let Some(section) = heading_section(line) {
            sections.push((section, String::new()));
            continue;
        }
        let into = match sections.last_mut() {
            Some((_, text)) => text,
            None => &mut preamble,
        };
        into.push_str(line);
        into.push('\n');
    }
    let mut out = "<spec>\n".to_string();
    for section in SECTIONS {
        // A section written twice keeps both parts, in order.
        let mut text: Vec<&str> = sections
            .iter()
            .filter(|(s, _)| *s == section)
            .map(|(_, text)| text.trim())
            .filter(|text| !text.is_empty())
            .collect();
        if section == "objective" && !preamble.trim().is_empty() {
            text.insert(0, preamble.trim());
        }
        let text = text.join("\n\n");
        // A tag name inside the text would end its section early: refuse rather than guess.
        if SECTIONS
            .iter()
            .chain(std::iter::once(&"spec"))
            .any(|tag| text.contains(&format!("<{tag}>")) || text.contains(&format!("</{tag}>")))
        {
            return None;
        }
        if text.is_empty() {
            out.push_str(&format!("<{section}></{section}>\n"));
        } else {
            out.push_str(&format!("<{section}>\n{text}\n</{section}>\n"));
        }
    }
    out.push_str("</spec>\n");
    parse(&out).ok().map(|_| out)
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

    #[test]
    fn a_heading_body_converts_to_the_tagged_format() {
        let body = "# Login form\n\n## Objective\nLet users log in.\n\n## Requirements\n- a form\n- a button\n\n## Out-of-scope\nSSO\n";
        let tagged = from_headings(body).expect("converts");
        let sections = parse(&tagged).expect("parses");
        assert_eq!(
            sections[0],
            ("objective", "# Login form\n\nLet users log in.".to_string())
        );
        assert_eq!(
            sections[1],
            (
                "functional_requirements",
                "- a form\n- a button".to_string()
            )
        );
        assert_eq!(sections[2], ("non_functional_requirements", String::new()));
        assert_eq!(sections[6], ("out_of_scope", "SSO".to_string()));
        // Nothing to convert: tagged already, or no section heading at all.
        assert_eq!(from_headings(&tagged), None);
        assert_eq!(from_headings("# Just a title\ntext"), None);
        // A tag in the text would split a section: refused, not guessed.
        assert_eq!(from_headings("## Objective\nuse </objective> here\n"), None);
    }

    #[test]
    fn a_misspelt_tag_is_named_with_the_one_meant() {
        let err = parse("<spec><functional_requirement></functional_requirement></spec>")
            .expect_err("unknown tag");
        assert!(
            err.to_string()
                .starts_with("spec body: unknown tag <functional_requirement> (did you mean <functional_requirements>?)"),
            "{err}"
        );
    }

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
