//! When a command line needs no shell, and how a value is put into one that does not.
//!
//! Canopy renders `{{markers}}` into command templates on the host and runs the rendered line in
//! an executor plugin. Both sides must agree, exactly, on which lines run directly (one `exec`,
//! no `sh`) and what the words of such a line are; this crate is that one definition, shared by
//! the host and the plugin SDK.
//!
//! - [`plain_words`]: a line of plain words (letters, digits, `-_./,:@+%=`, blanks) that is not a
//!   shell builtin, keyword or assignment. `sh -c` would run it as these words, so it runs them
//!   directly.
//! - [`quote`]: a value as one single-quoted word. The host uses it only in lines it runs
//!   directly, after the first word.
//! - [`direct_words`]: the words of a line of plain words in which single-quoted runs (`'…'`)
//!   and escaped quotes (`\'`) may stand after the first word: exactly what the host renders.
//!   These are split here, by this parser, never by a shell; a value is never re-parsed.
//!
//! ```
//! use canopy_shell_words::{direct_words, quote};
//!
//! let line = format!("git tag -m {} v1", quote("it's $(id); done"));
//! assert_eq!(
//!     direct_words(&line).unwrap(),
//!     ["git", "tag", "-m", "it's $(id); done", "v1"]
//! );
//! // Anything a shell would have to parse is not a direct line.
//! assert_eq!(direct_words("git log | head"), None);
//! ```

/// Shell builtins and keywords: a line starting with one means what the shell makes of it (some
/// have a program of the same name that behaves differently, such as `echo`).
pub const SHELL_WORDS: &[&str] = &[
    ".", ":", "[", "[[", "alias", "bg", "break", "case", "cd", "command", "continue", "do", "done",
    "echo", "elif", "else", "esac", "eval", "exec", "exit", "export", "false", "fc", "fg", "fi",
    "for", "function", "getopts", "hash", "if", "in", "jobs", "kill", "local", "printf", "pwd",
    "read", "readonly", "return", "select", "set", "shift", "source", "test", "then", "time",
    "times", "trap", "true", "type", "ulimit", "umask", "unalias", "unset", "until", "wait",
    "while",
];

/// True for a character a plain word may hold: no shell gives it a meaning.
pub fn is_plain_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-_./,:@+%=".contains(c)
}

fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// True when `word` may be a direct line's first word: not an assignment (`NAME=value`), not a
/// builtin or keyword.
fn may_start(word: &str) -> bool {
    !word.contains('=') && !SHELL_WORDS.contains(&word)
}

/// The words of a line of plain words that needs no shell to run, or `None`.
pub fn plain_words(line: &str) -> Option<Vec<&str>> {
    if !line.chars().all(|c| is_plain_char(c) || is_blank(c)) {
        return None;
    }
    let words: Vec<&str> = line.split([' ', '\t']).filter(|w| !w.is_empty()).collect();
    let first = *words.first()?;
    may_start(first).then_some(words)
}

/// `value` as one single-quoted shell word: `'…'`, with each `'` written `'\''`. NUL, which no
/// process argument can hold, is dropped.
pub fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for c in value.chars() {
        match c {
            '\'' => out.push_str(r"'\''"),
            '\0' => {}
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// The words of a direct line: plain words, where every word but the first may also hold
/// single-quoted runs (`'…'`, anything but `'` inside) and escaped single quotes (`\'`), as
/// [`quote`] writes them. `None` for any other line: it needs a shell.
pub fn direct_words(line: &str) -> Option<Vec<String>> {
    let mut words: Vec<String> = Vec::new();
    let mut word: Option<String> = None;
    let mut quoted_word = false;
    let mut chars = line.chars();
    let mut end_word = |word: &mut Option<String>, quoted: &mut bool| -> Option<()> {
        if let Some(done) = word.take() {
            if words.is_empty() && (*quoted || !may_start(&done)) {
                return None;
            }
            words.push(done);
        }
        *quoted = false;
        Some(())
    };
    while let Some(c) = chars.next() {
        match c {
            c if is_blank(c) => end_word(&mut word, &mut quoted_word)?,
            c if is_plain_char(c) => word.get_or_insert_with(String::new).push(c),
            '\'' => {
                quoted_word = true;
                let text = word.get_or_insert_with(String::new);
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => text.push(c),
                    }
                }
            }
            '\\' => {
                if chars.next()? != '\'' {
                    return None;
                }
                quoted_word = true;
                word.get_or_insert_with(String::new).push('\'');
            }
            _ => return None,
        }
    }
    end_word(&mut word, &mut quoted_word)?;
    (!words.is_empty()).then_some(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `sh` makes of `line` as arguments of `printf '%s\0'`: the shell's own word split.
    fn shell_split(line: &str) -> Vec<String> {
        let output = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("printf '%s\\0' {line}"))
            .output()
            .expect("sh runs");
        let text = String::from_utf8(output.stdout).expect("utf-8");
        text.split_terminator('\0').map(str::to_string).collect()
    }

    #[test]
    fn plain_words_run_directly_and_anything_shell_is_refused() {
        assert_eq!(plain_words("/bin/true"), Some(vec!["/bin/true"]));
        assert_eq!(
            plain_words("  cargo test --release -p web=1  "),
            Some(vec!["cargo", "test", "--release", "-p", "web=1"])
        );
        for line in [
            "",
            "   ",
            "echo hi",
            "true",
            "exit 3",
            "cd src",
            "FOO=1 make",
            "ls *.rs",
            "ls ~",
            "echo $HOME",
            "a | b",
            "a && b",
            "a; b",
            "a > out",
            "sleep 30 &",
            "git commit -m 'x y'",
            "printf \"%s\" x",
            "a\\ b",
            "a\nb",
            "cmd # note",
            "$(cmd)",
            "`cmd`",
            "ls [ab]",
            "ls {a,b}",
            "! cmd",
            "echo é",
        ] {
            assert_eq!(plain_words(line), None, "{line:?}");
        }
    }

    #[test]
    fn a_quoted_value_comes_back_as_one_word_exactly_as_a_shell_reads_it() {
        for value in [
            "plain",
            "",
            "two words",
            "it's",
            "''",
            "'\\''",
            "$(touch PWN)",
            "`touch PWN`",
            "a; touch PWN",
            "a\ntouch PWN",
            "a #\"b\"",
            "${IFS}$(touch${IFS}PWN)",
            "\\",
            "-rf",
            "*",
            "é ü 日本",
        ] {
            let line = format!("prog --x={} {} tail", quote(value), quote(value));
            let expected = [
                "prog".to_string(),
                format!("--x={value}"),
                value.to_string(),
                "tail".to_string(),
            ];
            assert_eq!(
                direct_words(&line).as_deref(),
                Some(&expected[..]),
                "{line}"
            );
            assert_eq!(shell_split(&line[5..]), expected[1..], "{line}");
        }
        assert_eq!(quote("a\0b"), "'ab'");
    }

    #[test]
    fn a_direct_line_is_refused_wherever_a_shell_would_be_needed() {
        for line in [
            "'prog' x",
            "pr'o'g x",
            "\\'prog x",
            "echo 'x'",
            "A=1 'x'",
            "prog 'unterminated",
            "prog \\x",
            "prog \\",
            "prog \"x\"",
            "prog 'x' | sh",
            "prog 'x';y",
            "prog $'x'",
            "prog\n'x'",
            "",
        ] {
            assert_eq!(direct_words(line), None, "{line:?}");
        }
        assert_eq!(
            direct_words("prog a''b \\'"),
            Some(vec!["prog".to_string(), "ab".to_string(), "'".to_string()])
        );
    }
}
