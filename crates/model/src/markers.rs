//! Markers: the `{{name}}` placeholders of hook and node configs, and the one place they are
//! rendered.
//!
//! A plugin's manifest names the config fields that are templates and how each escapes values
//! ([`Escape::Plain`] or [`Escape::Shell`]). Before every call the host renders those fields, so a
//! plugin never sees a marker; at edit time the same code refuses unknown markers and markers in
//! fields that are not templates, so no firing can leave a marker literal.
//!
//! # A value is never parsed by a shell
//!
//! Marker values are untrusted: a spec's name, a webhook's body, a git tag. In a shell field
//! ([`Escape::Shell`]) a value is never put where a shell would parse it:
//! - A template that needs no shell (plain words, see [`canopy_shell_words`]) is rendered with
//!   each value single-quoted inside its word, and the executor splits the line itself and runs
//!   it directly: the value is part of one argument, never split, never seen by `sh`.
//! - Any other template is rendered with each marker replaced by a quoted reference to an
//!   environment variable, `"${CANOPY_MARKER_SPEC_NAME}"`, and the value goes only into that
//!   variable, which the host sets on every process the call runs. The shell expands it as data
//!   wherever it stands: inside `$(…)`, after a `#`, in a `case`.
//!
//! The edit-time check that refuses markers inside quotes or here-documents keeps the rendered
//! line meaning what its author wrote (`"{{x}}"` would close and reopen the quotes); it is not
//! what keeps values inert, and where it cannot follow the line it refuses.

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
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Escape {
    /// Inserted as is.
    Plain,
    /// Quoted for a POSIX shell: always one inert word.
    Shell,
}

impl Escape {
    /// Its name, as a manifest writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::Shell => "shell",
        }
    }
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
    /// A marker in a shell field sits where its rendered reference would not mean what the
    /// line says (inside quotes), or where the check cannot tell.
    #[error(
        "field `{field}`: marker `{{{{{marker}}}}}` sits {context}; Canopy hands every marker's value to the shell as data itself, so write it outside any quotes (e.g. `echo \"done: \"{{{{{marker}}}}}`)"
    )]
    Quoted {
        field: String,
        marker: String,
        context: String,
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

/// The variable that carries marker `name`'s value to a shell that references it.
pub fn env_name(name: &str) -> String {
    format!("CANOPY_MARKER_{}", name.to_ascii_uppercase())
}

/// Renders `text` with every value inserted as is: every known marker becomes its value, or
/// `(none)` when the firing has no value for it.
pub fn render_plain(text: &str, values: &MarkerValues) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for occurrence in occurrences(text) {
        out.push_str(&text[last..occurrence.start]);
        out.push_str(values.get(occurrence.name).map_or(NONE, String::as_str));
        last = occurrence.end;
    }
    out.push_str(&text[last..]);
    out
}

/// A shell template rendered: the line, and the variables its references need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellLine {
    pub line: String,
    /// `CANOPY_MARKER_<NAME>` and its value, for each marker the line references.
    pub env: Vec<(String, String)>,
}

/// Renders a shell template (see the module docs): a line that needs no shell gets each value
/// single-quoted inside its word, any other line a quoted reference to the value's variable.
/// A marker the firing has no value for renders as `'(none)'`.
pub fn render_shell(text: &str, values: &MarkerValues) -> ShellLine {
    let found = occurrences(text);
    let direct = runs_directly(text, &found);
    let mut line = String::with_capacity(text.len());
    let mut env: Vec<(String, String)> = Vec::new();
    let mut last = 0;
    for occurrence in &found {
        line.push_str(&text[last..occurrence.start]);
        match values.get(occurrence.name) {
            Some(value) if !direct => {
                let name = env_name(occurrence.name);
                line.push_str(&format!("\"${{{name}}}\""));
                if !env.iter().any(|(known, _)| *known == name) {
                    // No variable can hold a NUL.
                    env.push((name, value.replace('\0', "")));
                }
            }
            Some(value) => line.push_str(&canopy_shell_words::quote(value)),
            None => line.push_str(&canopy_shell_words::quote(NONE)),
        }
        last = occurrence.end;
    }
    line.push_str(&text[last..]);
    ShellLine { line, env }
}

/// True when `text`, its markers filled, needs no shell: plain words with no marker in the
/// first (the program is never a value).
fn runs_directly(text: &str, found: &[Occurrence<'_>]) -> bool {
    // Each marker stands as `=`, a plain character that no first word may hold.
    let mut probe = String::with_capacity(text.len());
    let mut last = 0;
    for occurrence in found {
        probe.push_str(&text[last..occurrence.start]);
        probe.push('=');
        last = occurrence.end;
    }
    probe.push_str(&text[last..]);
    canopy_shell_words::plain_words(&probe).is_some()
}

/// Where in a shell command a marker sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ShellContext {
    /// Outside quotes (also inside `$(...)` or backticks, which start a fresh command).
    Word,
    Single,
    Double,
    HereDocument,
    Comment,
    /// After a construct the check does not follow; the reason names it.
    Unsure(&'static str),
}

impl ShellContext {
    /// Where the marker sits, as the end of "marker `{{x}}` sits …"; `None` where it may.
    fn describe(self) -> Option<String> {
        match self {
            Self::Word => None,
            Self::Single => Some("inside single quotes".into()),
            Self::Double => Some("inside double quotes".into()),
            Self::HereDocument => Some("inside a here-document".into()),
            Self::Comment => Some("inside a comment, where it does nothing".into()),
            Self::Unsure(after) => Some(format!("after {after}, which the check does not follow")),
        }
    }
}

/// The quoting context of each marker occurrence in a shell command, as a POSIX shell parses it:
/// quotes, backslash escapes, `$(...)` and backticks (which open a fresh, unquoted command even
/// inside double quotes), `${…}`, comments (a `#` that starts a word), and here-documents. Past
/// a construct it does not follow (a `${…}` holding quotes or substitutions, a `case` inside
/// `$(…)`, a backslash inside backticks, backticks inside double quotes) every later marker is
/// [`ShellContext::Unsure`]: the check refuses what it cannot tell.
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
    let mut in_comment = false;
    let mut unsure: Option<&'static str> = None;
    // True where a `#` would start a comment: at the start of a word.
    let mut word_start = true;
    let mut i = 0;
    while i < bytes.len() {
        if let Some(marker) = next_marker.next_if(|m| m.start <= i) {
            let top = *stack.last().unwrap_or(&Frame::Top);
            let context = if let Some(after) = unsure {
                ShellContext::Unsure(after)
            } else if in_heredoc {
                ShellContext::HereDocument
            } else if in_comment {
                ShellContext::Comment
            } else {
                match top {
                    Frame::Single => ShellContext::Single,
                    Frame::Double => ShellContext::Double,
                    Frame::Backtick if stack.contains(&Frame::Double) => {
                        ShellContext::Unsure("backticks inside double quotes (write `$(…)`)")
                    }
                    Frame::Top | Frame::Subst(_) | Frame::Backtick => ShellContext::Word,
                }
            };
            found.push((marker.name, context));
            i = marker.end;
            word_start = false;
            continue;
        }
        let c = bytes[i];
        let next = bytes.get(i + 1).copied();
        let top = *stack.last().unwrap_or(&Frame::Top);
        if in_heredoc || unsure.is_some() {
            i += 1;
            continue;
        }
        if in_comment {
            if c == b'\n' {
                in_comment = false;
                word_start = true;
                if heredoc_pending {
                    in_heredoc = true;
                }
            }
            i += 1;
            continue;
        }
        if c == b'$' && next == Some(b'{') && top != Frame::Single {
            // `${name}` and `${name:-word}` without quotes, substitutions or markers inside are
            // followed; anything else is not.
            let close = text[i + 2..].find('}').map(|at| i + 2 + at);
            match close {
                Some(close)
                    if !text[i + 2..close].contains(['\'', '"', '`', '\\', '{', '$', '\n']) =>
                {
                    i = close + 1;
                }
                _ => {
                    unsure =
                        Some("a `${…}` expansion with quotes, substitutions or markers inside");
                    i += 1;
                }
            }
            word_start = false;
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
                    word_start = true;
                    i += 1;
                }
                b'`' => {
                    stack.push(Frame::Backtick);
                    word_start = true;
                }
                _ => {}
            },
            Frame::Top | Frame::Subst(_) | Frame::Backtick => {
                let starts_word = word_start;
                word_start = false;
                match c {
                    b'\\' if top == Frame::Backtick => {
                        unsure = Some("a backslash inside backticks (write `$(…)`)");
                    }
                    b'\\' if next == Some(b'\n') => {
                        // A line continuation: the word goes on as if it were not there.
                        word_start = starts_word;
                        i += 1;
                    }
                    b'\\' => i += 1,
                    b'\'' => stack.push(Frame::Single),
                    b'"' => stack.push(Frame::Double),
                    b'`' if top == Frame::Backtick => {
                        stack.pop();
                    }
                    b'`' => {
                        stack.push(Frame::Backtick);
                        word_start = true;
                    }
                    b'$' if next == Some(b'(') => {
                        stack.push(Frame::Subst(0));
                        word_start = true;
                        i += 1;
                    }
                    b'(' => {
                        if let Some(Frame::Subst(depth)) = stack.last_mut() {
                            *depth += 1;
                        }
                        word_start = true;
                    }
                    b')' => {
                        match stack.last_mut() {
                            Some(Frame::Subst(0)) => {
                                stack.pop();
                            }
                            Some(Frame::Subst(depth)) => *depth -= 1,
                            _ => {}
                        }
                        word_start = true;
                    }
                    b'#' if starts_word => in_comment = true,
                    b'<' if next == Some(b'<') && bytes.get(i + 2) != Some(&b'<') => {
                        heredoc_pending = true;
                        word_start = true;
                        i += 1;
                    }
                    b'\n' if heredoc_pending => in_heredoc = true,
                    b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'<' | b'>' => word_start = true,
                    b'c' if starts_word
                        && matches!(top, Frame::Subst(_) | Frame::Backtick)
                        && text[i..].starts_with("case")
                        && bytes
                            .get(i + 4)
                            .is_none_or(|b| b.is_ascii_whitespace() || *b == b';') =>
                    {
                        unsure = Some("a `case` inside a command substitution");
                    }
                    _ => {}
                }
            }
        }
        i += 1;
    }
    found
}

/// The first marker of a shell template that sits where its rendered reference would not mean
/// what the line says (inside quotes, a here-document or a comment), or where the check cannot
/// tell.
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

/// Checks that every shell template field of `config` renders as written (no marker inside
/// quotes).
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

/// Renders the template fields of `config` in place. Returns the variables the rendered shell
/// fields reference (see [`render_shell`]): the host sets them on every process of the call.
#[must_use = "the rendered shell fields reference these variables"]
pub fn render_config(
    config: &mut serde_json::Map<String, Value>,
    templates: &[(String, Escape)],
    values: &MarkerValues,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::new();
    for (field, how) in templates {
        if let Some(Value::String(text)) = config.get_mut(field) {
            match how {
                Escape::Plain => *text = render_plain(text, values),
                Escape::Shell => {
                    let rendered = render_shell(text, values);
                    *text = rendered.line;
                    for (name, value) in rendered.env {
                        if !env.iter().any(|(known, _)| *known == name) {
                            env.push((name, value));
                        }
                    }
                }
            }
        }
    }
    env
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

    /// The values no marker may let out: each tries to run `touch PWN` in a shell that
    /// re-parsed it.
    const HOSTILE: &[&str] = &[
        "$(touch PWN)",
        "`touch PWN`",
        "x; touch PWN",
        "x\ntouch PWN",
        "x && touch PWN #",
        "'; touch PWN; '",
        "\"; touch PWN; \"",
        "$(touch${IFS}PWN)",
        "x #\"$(touch PWN)\"",
        "\\'$(touch PWN)",
        "*",
        "-n",
        "",
    ];

    /// Runs `line` as the command executor would, in a fresh directory with the rendered
    /// variables set: directly when it needs no shell, else under `sh -c`. Returns stdout and
    /// whether anything created `PWN`.
    fn run_rendered(rendered: &ShellLine) -> (String, bool) {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut command = match canopy_shell_words::direct_words(&rendered.line) {
            Some(words) => {
                let mut command = std::process::Command::new(&words[0]);
                command.args(&words[1..]);
                command
            }
            None => {
                let mut command = std::process::Command::new("sh");
                command.arg("-c").arg(&rendered.line);
                command
            }
        };
        let output = command
            .current_dir(dir.path())
            .envs(rendered.env.iter().map(|(k, v)| (k, v)))
            .output()
            .expect("the command runs");
        (
            String::from_utf8_lossy(&output.stdout).into_owned(),
            dir.path().join("PWN").exists(),
        )
    }

    #[test]
    fn plain_rendering_fills_known_markers_and_none_for_missing() {
        let text = "graph {{graph_name}} spec {{ spec_name }} blocker {{blocker}}";
        let out = render_plain(
            text,
            &values(&[("graph_name", "g1"), ("spec_name", "Login")]),
        );
        assert_eq!(out, "graph g1 spec Login blocker (none)");
    }

    #[test]
    fn a_line_without_shell_syntax_gets_quoted_values_it_splits_without_a_shell() {
        let rendered = render_shell(
            "/usr/bin/printf %s--%s {{spec_name}} --tag={{ node }}",
            &values(&[("spec_name", "x; rm -rf ~"), ("node", "it's")]),
        );
        assert_eq!(
            rendered.line,
            r"/usr/bin/printf %s--%s 'x; rm -rf ~' --tag='it'\''s'"
        );
        assert!(rendered.env.is_empty());
        assert_eq!(
            canopy_shell_words::direct_words(&rendered.line),
            Some(
                ["/usr/bin/printf", "%s--%s", "x; rm -rf ~", "--tag=it's"]
                    .map(String::from)
                    .to_vec()
            )
        );
        for hostile in HOSTILE {
            let rendered = render_shell(
                "/usr/bin/printf %s {{spec_name}}",
                &values(&[("spec_name", hostile)]),
            );
            assert_eq!(
                run_rendered(&rendered),
                (hostile.to_string(), false),
                "{rendered:?}"
            );
        }
        // A missing marker renders `(none)`, quoted the same way.
        assert_eq!(
            render_shell("/bin/echo {{x}}", &MarkerValues::new()).line,
            "/bin/echo '(none)'"
        );
    }

    #[test]
    fn a_shell_line_gets_references_to_variables_that_hold_the_values() {
        let rendered = render_shell(
            "echo {{spec_name}} | tee out-{{spec_name}}.txt >&2; printf %s {{node}}",
            &values(&[("spec_name", "x; id"), ("node", "n1")]),
        );
        assert_eq!(
            rendered.line,
            r#"echo "${CANOPY_MARKER_SPEC_NAME}" | tee out-"${CANOPY_MARKER_SPEC_NAME}".txt >&2; printf %s "${CANOPY_MARKER_NODE}""#
        );
        assert_eq!(
            rendered.env,
            vec![
                ("CANOPY_MARKER_SPEC_NAME".to_string(), "x; id".to_string()),
                ("CANOPY_MARKER_NODE".to_string(), "n1".to_string()),
            ]
        );
        // A value as the program is never quoted into a direct line: the shell runs it.
        assert!(
            render_shell("{{node}} --help", &values(&[("node", "x")]))
                .line
                .starts_with("\"${CANOPY_MARKER_NODE}\"")
        );
        for template in [
            "printf %s {{spec_name}}",
            "printf %s \"$(printf %s {{spec_name}})\"",
            "x=`printf %s {{spec_name}}`; printf %s \"$x\"",
            "printf %s ''{{spec_name}}",
            "printf %s {{spec_name}} # {{spec_name}} is not here",
            "case {{spec_name}} in *) printf %s {{spec_name}};; esac",
            "x=${HOME:-/} printf %s {{spec_name}}",
        ] {
            for hostile in HOSTILE {
                let rendered = render_shell(template, &values(&[("spec_name", hostile)]));
                assert_eq!(
                    run_rendered(&rendered),
                    (hostile.to_string(), false),
                    "{template} with {hostile:?}: {rendered:?}"
                );
            }
        }
    }

    #[test]
    fn what_the_quoting_check_refuses_still_runs_nothing_when_rendered() {
        // These walked around the old check; rendered now, the value is only ever data.
        for template in [
            r#"echo g\ #"{{spec_name}}" > f"#,
            r#"echo ${x:-a #} "{{spec_name}}""#,
            r#""$(case a in a) echo "{{spec_name}}";; esac)""#,
            r#"echo note\ #"{{spec_name}}" > f"#,
            r#"echo "{{spec_name}}""#,
            "echo '{{spec_name}}'",
            "cat <<EOF\n{{spec_name}}\nEOF",
            "echo \"`echo {{spec_name}}`\"",
        ] {
            assert!(
                check_shell_quoting("command", template).is_err(),
                "{template}"
            );
            for hostile in HOSTILE {
                let rendered = render_shell(template, &values(&[("spec_name", hostile)]));
                assert!(!run_rendered(&rendered).1, "{template} with {hostile:?}");
            }
        }
    }

    #[test]
    fn markers_inside_quotes_or_where_the_check_cannot_tell_are_refused() {
        let refused = [
            (r#"echo "{{spec_name}}""#, "inside double quotes"),
            (r#"echo "done: {{spec_name}} now""#, "inside double quotes"),
            ("echo '{{spec_name}}'", "inside single quotes"),
            (
                r#"echo "$(printf '%s' "{{spec_name}}")""#,
                "inside double quotes",
            ),
            ("cat <<EOF\n{{spec_name}}\nEOF", "inside a here-document"),
            (r#"echo g\ #"{{spec_name}}" > f"#, "inside double quotes"),
            (r#"echo ${x:-a #} "{{spec_name}}""#, "inside double quotes"),
            (
                r#""$(case a in a) echo "{{spec_name}}";; esac)""#,
                "after a `case` inside a command substitution",
            ),
            ("echo ok # {{spec_name}}", "inside a comment"),
            ("echo ${x:-\"a\"} {{spec_name}}", "after a `${…}` expansion"),
            ("echo ${x:-{{spec_name}}}", "after a `${…}` expansion"),
            (
                "echo `echo \\`x\\`` {{spec_name}}",
                "after a backslash inside backticks",
            ),
            (
                "echo \"`echo {{spec_name}}`\"",
                "after backticks inside double quotes",
            ),
        ];
        for (command, context) in refused {
            let err = check_shell_quoting("command", command)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                err.starts_with(&format!(
                    "field `command`: marker `{{{{spec_name}}}}` sits {context}"
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
            "echo a#b {{spec_name}}",
            "echo ${HOME:-/tmp} $# {{spec_name}}",
            "cat <<EOF {{spec_name}}\nbody\nEOF",
            "case {{spec_name}} in a) echo a;; esac",
            "make \\\n  {{spec_name}}",
        ];
        for command in allowed {
            assert_eq!(check_shell_quoting("command", command), Ok(()), "{command}");
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
