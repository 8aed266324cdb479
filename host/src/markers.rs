//! Markers: the `{{name}}` placeholders of hook and node configs, and the one place they are
//! rendered.
//!
//! A plugin's manifest names the config fields that are templates and how each escapes values
//! ([`Escape::Plain`] or [`Escape::Shell`]). Before every call the host renders those fields, so a
//! plugin never sees a marker; at edit time the same code refuses unknown markers and markers in
//! fields that are not templates, so no firing can leave a marker literal.

use std::collections::BTreeMap;

use serde_json::Value;

/// The value every known marker without a value for the event renders as.
pub const NONE: &str = "(none)";

/// The markers hooks accept.
pub const HOOK_MARKERS: &[&str] = &[
    "graph_name",
    "workdir",
    "completed_specs",
    "spec_name",
    "spec_id",
    "blocker",
    "node",
];

/// The markers graph nodes accept: the hook markers plus the spec's body.
pub const NODE_MARKERS: &[&str] = &[
    "graph_name",
    "workdir",
    "completed_specs",
    "spec_name",
    "spec_id",
    "blocker",
    "node",
    "spec_body",
];

/// How a marker's value is escaped in a template field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Escape {
    /// Inserted as is.
    Plain,
    /// Quoted for a POSIX shell: always one inert word.
    Shell,
}

/// Marker values for one firing, by name (without braces).
pub type MarkerValues = BTreeMap<String, String>;

/// A marker problem found at edit time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MarkerError {
    /// `{{name}}` is not a marker this kind of work supports.
    #[error("field `{field}`: unknown marker `{{{{{marker}}}}}`; supported markers: {}", supported_list(.supported))]
    Unknown {
        field: String,
        marker: String,
        supported: Vec<String>,
    },
    /// A marker in a shell field sits where its quoted value would not stay one inert word.
    #[error(
        "field `{field}`: marker `{{{{{marker}}}}}` sits inside {context}; Canopy quotes every marker's value for the shell itself, so write it outside any quotes (e.g. `echo \"done: \"{{{{{marker}}}}}`)"
    )]
    Quoted {
        field: String,
        marker: String,
        context: &'static str,
    },
    /// A field that is not a template holds a marker.
    #[error("field `{field}` does not take markers (found `{{{{{marker}}}}}`); markers are rendered only in: {}", if .templates.is_empty() { "no field of this mode".to_string() } else { .templates.join(", ") })]
    NotATemplate {
        field: String,
        marker: String,
        templates: Vec<String>,
    },
}

fn supported_list(supported: &[String]) -> String {
    supported
        .iter()
        .map(|m| format!("{{{{{m}}}}}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One `{{name}}` occurrence: byte range and the name.
struct Occurrence<'a> {
    start: usize,
    end: usize,
    name: &'a str,
}

/// Finds `{{ name }}` occurrences whose name is an identifier (`[a-z_][a-z0-9_]*`, any case).
/// Braces around anything else (`{{ .Foo }}`, `${{ x.y }}`) are left alone.
fn occurrences(text: &str) -> Vec<Occurrence<'_>> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(open) = text[from..].find("{{").map(|i| i + from) {
        let Some(close) = text[open + 2..].find("}}").map(|i| i + open + 2) else {
            break;
        };
        let name = text[open + 2..close].trim();
        let is_ident = !name.is_empty()
            && name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if is_ident {
            found.push(Occurrence {
                start: open,
                end: close + 2,
                name,
            });
            from = close + 2;
        } else {
            from = open + 2;
        }
    }
    found
}

/// The marker names used in `text`, in order of appearance.
pub fn used(text: &str) -> Vec<&str> {
    occurrences(text).into_iter().map(|o| o.name).collect()
}

/// Escapes one value.
pub fn escape(value: &str, escape: Escape) -> String {
    match escape {
        Escape::Plain => value.to_string(),
        Escape::Shell => {
            // NUL cannot be passed to a shell at all; drop it rather than fail the firing.
            let value = value.replace('\0', "");
            shlex::try_quote(&value)
                .map(|quoted| quoted.into_owned())
                .unwrap_or_else(|_| format!("'{}'", value.replace('\'', r"'\''")))
        }
    }
}

/// Renders `text`: every known marker becomes its escaped value, or `(none)` (escaped the same
/// way) when the firing has no value for it.
pub fn render(text: &str, values: &MarkerValues, how: Escape) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for occurrence in occurrences(text) {
        out.push_str(&text[last..occurrence.start]);
        let value = values.get(occurrence.name).map_or(NONE, String::as_str);
        out.push_str(&escape(value, how));
        last = occurrence.end;
    }
    out.push_str(&text[last..]);
    out
}

/// Where in a shell command a marker sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ShellContext {
    /// Outside quotes (also inside `$(...)` or backticks, which start a fresh command).
    Word,
    Single,
    Double,
    HereDocument,
}

impl ShellContext {
    fn describe(self) -> Option<&'static str> {
        match self {
            Self::Word => None,
            Self::Single => Some("single quotes"),
            Self::Double => Some("double quotes"),
            Self::HereDocument => Some("a here-document"),
        }
    }
}

/// The quoting context of each marker occurrence in a shell command, as a POSIX shell parses it:
/// quotes, backslash escapes, `$(...)` and backticks (which open a fresh, unquoted command even
/// inside double quotes), comments, and here-documents (whose bodies expand `$(...)`).
fn shell_contexts(text: &str) -> Vec<(&str, ShellContext)> {
    #[derive(Clone, Copy, PartialEq)]
    enum Frame {
        Top,
        Subst(u32),
        Backtick,
        Single,
        Double,
    }
    let bytes = text.as_bytes();
    let markers = occurrences(text);
    let mut next_marker = markers.iter().peekable();
    let mut found = Vec::new();
    let mut stack = vec![Frame::Top];
    let mut heredoc_pending = false;
    let mut in_heredoc = false;
    let mut i = 0;
    while i < bytes.len() {
        if let Some(marker) = next_marker.next_if(|m| m.start <= i) {
            let top = *stack.last().unwrap_or(&Frame::Top);
            let context = if in_heredoc {
                ShellContext::HereDocument
            } else {
                match top {
                    Frame::Single => ShellContext::Single,
                    Frame::Double => ShellContext::Double,
                    Frame::Top | Frame::Subst(_) | Frame::Backtick => ShellContext::Word,
                }
            };
            found.push((marker.name, context));
            i = marker.end;
            continue;
        }
        let c = bytes[i];
        let next = bytes.get(i + 1).copied();
        let top = *stack.last().unwrap_or(&Frame::Top);
        if in_heredoc {
            i += 1;
            continue;
        }
        match top {
            Frame::Single => {
                if c == b'\'' {
                    stack.pop();
                }
            }
            Frame::Double => match c {
                b'\\' => i += 1,
                b'"' => {
                    stack.pop();
                }
                b'$' if next == Some(b'(') => {
                    stack.push(Frame::Subst(0));
                    i += 1;
                }
                b'`' => stack.push(Frame::Backtick),
                _ => {}
            },
            Frame::Top | Frame::Subst(_) | Frame::Backtick => match c {
                b'\\' => i += 1,
                b'\'' => stack.push(Frame::Single),
                b'"' => stack.push(Frame::Double),
                b'`' if top == Frame::Backtick => {
                    stack.pop();
                }
                b'`' => stack.push(Frame::Backtick),
                b'$' if next == Some(b'(') => {
                    stack.push(Frame::Subst(0));
                    i += 1;
                }
                b'(' => {
                    if let Some(Frame::Subst(depth)) = stack.last_mut() {
                        *depth += 1;
                    }
                }
                b')' => match stack.last_mut() {
                    Some(Frame::Subst(0)) => {
                        stack.pop();
                    }
                    Some(Frame::Subst(depth)) => *depth -= 1,
                    _ => {}
                },
                b'#' if i == 0
                    || bytes[i - 1].is_ascii_whitespace()
                    || b";&|(".contains(&bytes[i - 1]) =>
                {
                    // A comment: nothing up to the end of the line is parsed.
                    while i + 1 < bytes.len() && bytes[i + 1] != b'\n' {
                        i += 1;
                    }
                }
                b'<' if next == Some(b'<') && bytes.get(i + 2) != Some(&b'<') => {
                    heredoc_pending = true;
                    i += 1;
                }
                b'\n' if heredoc_pending => in_heredoc = true,
                _ => {}
            },
        }
        i += 1;
    }
    found
}

/// The first marker of a shell template that sits inside quotes or a here-document, where its
/// shell-quoted value would not stay one inert word.
fn check_shell_quoting(field: &str, text: &str) -> Result<(), MarkerError> {
    match shell_contexts(text)
        .into_iter()
        .find_map(|(marker, context)| context.describe().map(|c| (marker, c)))
    {
        Some((marker, context)) => Err(MarkerError::Quoted {
            field: field.to_string(),
            marker: marker.to_string(),
            context,
        }),
        None => Ok(()),
    }
}

/// Checks that every shell template field of `config` renders safely (no marker inside quotes).
/// Run at edit time by [`check_config`], and again before each call for configs stored earlier.
pub fn check_rendering(
    config: &serde_json::Map<String, Value>,
    templates: &[(String, Escape)],
) -> Result<(), MarkerError> {
    for (field, how) in templates {
        if let (Escape::Shell, Some(Value::String(text))) = (how, config.get(field)) {
            check_shell_quoting(field, text)?;
        }
    }
    Ok(())
}

/// Checks a config at edit time: markers only in template fields, only supported ones, and in
/// shell fields never inside quotes.
pub fn check_config(
    config: &serde_json::Map<String, Value>,
    templates: &[(String, Escape)],
    supported: &[&str],
) -> Result<(), MarkerError> {
    for (field, value) in config {
        let mut strings = Vec::new();
        collect_strings(value, &mut strings);
        let is_template = templates.iter().any(|(name, _)| name == field);
        for text in strings {
            for marker in used(text) {
                if !is_template {
                    return Err(MarkerError::NotATemplate {
                        field: field.clone(),
                        marker: marker.to_string(),
                        templates: templates.iter().map(|(name, _)| name.clone()).collect(),
                    });
                }
                if !supported.contains(&marker) {
                    return Err(MarkerError::Unknown {
                        field: field.clone(),
                        marker: marker.to_string(),
                        supported: supported.iter().map(|m| (*m).to_string()).collect(),
                    });
                }
            }
        }
    }
    check_rendering(config, templates)
}

fn collect_strings<'a>(value: &'a Value, into: &mut Vec<&'a str>) {
    match value {
        Value::String(text) => into.push(text),
        Value::Array(items) => items.iter().for_each(|item| collect_strings(item, into)),
        Value::Object(map) => map.values().for_each(|item| collect_strings(item, into)),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// Renders the template fields of `config` in place.
pub fn render_config(
    config: &mut serde_json::Map<String, Value>,
    templates: &[(String, Escape)],
    values: &MarkerValues,
) {
    for (field, how) in templates {
        if let Some(Value::String(text)) = config.get_mut(field) {
            *text = render(text, values, *how);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(pairs: &[(&str, &str)]) -> MarkerValues {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    /// What `sh -c command` prints on stdout.
    fn sh_prints(command: &str) -> String {
        std::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    #[test]
    fn plain_rendering_fills_known_markers_and_none_for_missing() {
        let text = "graph {{graph_name}} spec {{ spec_name }} blocker {{blocker}}";
        let out = render(
            text,
            &values(&[("graph_name", "g1"), ("spec_name", "Login")]),
            Escape::Plain,
        );
        assert_eq!(out, "graph g1 spec Login blocker (none)");
    }

    #[test]
    fn shell_rendering_keeps_hostile_values_one_word() {
        let out = render(
            "echo {{spec_name}}",
            &values(&[("spec_name", "x; rm -rf ~")]),
            Escape::Shell,
        );
        assert_eq!(out, "echo 'x; rm -rf ~'");
        for hostile in [
            "it's $(id)",
            "`id`",
            "a\nb",
            "$HOME",
            "\"; echo pwned; \"",
            "*",
            "-n",
        ] {
            let command = render(
                "printf %s {{spec_name}}",
                &values(&[("spec_name", hostile)]),
                Escape::Shell,
            );
            assert_eq!(sh_prints(&command), hostile, "command was {command}");
        }
        assert_eq!(
            render("{{x}}", &MarkerValues::new(), Escape::Shell),
            "'(none)'"
        );
    }

    #[test]
    fn markers_inside_quotes_or_here_documents_are_refused() {
        let refused = [
            (r#"echo "{{spec_name}}""#, "double quotes"),
            (r#"echo "done: {{spec_name}} now""#, "double quotes"),
            ("echo '{{spec_name}}'", "single quotes"),
            (r#"echo "$(printf '%s' "{{spec_name}}")""#, "double quotes"),
            ("cat <<EOF\n{{spec_name}}\nEOF", "a here-document"),
        ];
        for (command, context) in refused {
            let err = check_shell_quoting("command", command)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                err.starts_with(&format!(
                    "field `command`: marker `{{{{spec_name}}}}` sits inside {context}"
                )),
                "{command}: {err}"
            );
        }
        let allowed = [
            "echo {{spec_name}}",
            "notify-send 'done: '{{spec_name}}",
            r#"echo "done: "{{spec_name}} 'and' "more""#,
            r#"echo "$(printf %s {{spec_name}})""#,
            "echo `basename {{workdir}}`",
            r#"echo \"{{spec_name}}\""#,
            "echo {{spec_name}} # it's \"fine\"",
            "cat <<EOF {{spec_name}}\nbody\nEOF",
        ];
        for command in allowed {
            assert_eq!(check_shell_quoting("command", command), Ok(()), "{command}");
        }
    }

    #[test]
    fn a_hostile_value_in_an_accepted_template_stays_inert() {
        // Each template the check accepts, rendered with a value that tries to break out, runs
        // as one word.
        let hostile = "$(touch x)'\"`id`\"' ; echo pwned";
        for template in [
            "printf %s {{spec_name}}",
            r#"printf %s "$(printf %s {{spec_name}})""#,
            "printf %s ''{{spec_name}}",
        ] {
            assert_eq!(check_shell_quoting("command", template), Ok(()));
            let command = render(template, &values(&[("spec_name", hostile)]), Escape::Shell);
            assert_eq!(sh_prints(&command), hostile, "command was {command}");
        }
    }

    #[test]
    fn non_identifier_braces_are_left_alone() {
        let text = "echo ${{ github.sha }} {{ .Name }} {{graph_name}}";
        assert_eq!(used(text), vec!["graph_name"]);
    }

    #[test]
    fn unknown_marker_is_named_with_the_supported_list() {
        let config = serde_json::json!({ "command": "echo {{spec_nme}}" });
        let templates = vec![("command".to_string(), Escape::Shell)];
        let err = check_config(
            config.as_object().unwrap_or(&Default::default()),
            &templates,
            HOOK_MARKERS,
        )
        .err()
        .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "field `command`: unknown marker `{{spec_nme}}`; supported markers: {{graph_name}}, {{workdir}}, {{completed_specs}}, {{spec_name}}, {{spec_id}}, {{blocker}}, {{node}}"
            )
        );
    }

    #[test]
    fn markers_outside_template_fields_are_refused() {
        let config = serde_json::json!({ "prompt": "hi", "target_session_name": "{{graph_name}}" });
        let templates = vec![("prompt".to_string(), Escape::Plain)];
        let err = check_config(
            config.as_object().unwrap_or(&Default::default()),
            &templates,
            HOOK_MARKERS,
        );
        assert!(
            matches!(err, Err(MarkerError::NotATemplate { ref field, .. }) if field == "target_session_name")
        );
    }
}
