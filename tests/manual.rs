//! The README and the manual under `docs/` hold together: every relative link in `README.md`,
//! `ARCHITECTURE.md` and the manual's chapters (`docs/src/*.md`) lands on a file that exists and,
//! with a `#anchor`, on a heading of that file (GitHub's slugs, which mdBook's ids match); every
//! `{{#include file:anchor}}` finds its file and its anchor; `SUMMARY.md` lists every chapter and
//! only chapters that exist; and the README stays short (at most 4,500 words). Links inside fenced
//! code blocks and inline code are not links, and are left alone.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the repository root")
}

/// The manual's chapters, `SUMMARY.md` included, sorted.
fn chapters() -> Vec<PathBuf> {
    let src = root().join("docs/src");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&src)
        .expect("docs/src")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    found.sort();
    found
}

/// Every markdown file whose links are checked.
fn checked_files() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md"), root().join("ARCHITECTURE.md")];
    files.extend(chapters());
    files
}

/// A path as a message shows it: from the repository's root, `..` steps resolved.
fn shown(path: &Path) -> String {
    let mut parts: Vec<std::path::Component<'_>> = Vec::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                parts.pop();
            }
            std::path::Component::CurDir => {}
            other => parts.push(other),
        }
    }
    let whole: PathBuf = parts.iter().collect();
    whole
        .strip_prefix(root())
        .map_or_else(|_| whole.display().to_string(), |p| p.display().to_string())
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// `text` with every fenced code block blanked out (its lines kept, empty), so that what is left
/// is prose and headings, on the lines they were on.
fn without_fences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    // The fence that opened the block we are in: its character and length.
    let mut open: Option<(char, usize)> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let fence = ['`', '~'].into_iter().find_map(|c| {
            let run = trimmed.chars().take_while(|&x| x == c).count();
            (run >= 3).then_some((c, run))
        });
        match (open, fence) {
            (None, Some(started)) => {
                open = Some(started);
                out.push(String::new());
            }
            (Some((c, len)), Some((d, run)))
                if c == d && run >= len && trimmed.trim_end().chars().all(|x| x == c) =>
            {
                open = None;
                out.push(String::new());
            }
            (Some(_), _) => out.push(String::new()),
            (None, None) => out.push(line.to_string()),
        }
    }
    out
}

/// A paragraph's text with its inline code spans taken out (CommonMark: a run of N backticks
/// up to the next run of exactly N; an unmatched run is plain text).
fn without_code_spans(paragraph: &str) -> String {
    let chars: Vec<char> = paragraph.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|&&c| c == '`').count();
        // Where a closing run of exactly `run` backticks starts, if anywhere.
        let mut j = i + run;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let other = chars[j..].iter().take_while(|&&c| c == '`').count();
                if other == run {
                    close = Some(j);
                    break;
                }
                j += other;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                out.push(' ');
                i = j + run;
            }
            None => {
                out.extend(std::iter::repeat_n('`', run));
                i += run;
            }
        }
    }
    out
}

/// The prose of a file: fenced blocks out, then code spans out of each paragraph.
fn prose(text: &str) -> String {
    without_fences(text)
        .join("\n")
        .split("\n\n")
        .map(without_code_spans)
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Every link target in a file's prose: inline links `[text](target)` and reference
/// definitions `[name]: target`.
fn links(text: &str) -> Vec<String> {
    let prose = prose(text);
    let mut found = Vec::new();
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let target: String = after
            .trim_start()
            .trim_start_matches('<')
            .chars()
            .take_while(|&c| c != ')' && c != '>' && !c.is_whitespace())
            .collect();
        found.push(target);
        rest = after;
    }
    for line in prose.lines() {
        let line = line.trim_start();
        if line.starts_with('[')
            && let Some((label, target)) = line.split_once("]:")
            && !label.contains(']')
            && let Some(target) = target.split_whitespace().next()
        {
            found.push(target.trim_matches(['<', '>']).to_string());
        }
    }
    found
}

/// A heading's anchor as GitHub makes it (and mdBook, for these headings): the text without its
/// markup, lowercased; letters, digits, `_`, `-` kept, spaces made `-`, the rest dropped.
fn slug(heading: &str) -> String {
    // A link in a heading counts by its text: `[text](target)` -> `text`.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let inner = &rest[open + 1..];
        match inner.find("](").and_then(|mid| {
            let close = inner[mid..].find(')')?;
            Some((mid, mid + close))
        }) {
            Some((mid, close)) => {
                text.push_str(&inner[..mid]);
                rest = &inner[close + 1..];
            }
            None => {
                text.push('[');
                rest = inner;
            }
        }
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors a file's headings make, duplicates numbered the GitHub way (`x`, `x-1`, `x-2`),
/// and any `<a id="...">` / `<a name="...">` it sets.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut found = BTreeSet::new();
    for line in without_fences(text) {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let trimmed = line.trim_start_matches(' ');
        let level = trimmed.chars().take_while(|&c| c == '#').count();
        let is_heading = indent <= 3
            && (1..=6).contains(&level)
            && trimmed[level..]
                .chars()
                .next()
                .is_none_or(|c| c == ' ' || c == '\t');
        if is_heading {
            // A closing sequence of `#`s is not part of the heading.
            let title = trimmed[level..].trim();
            let title = match title.trim_end_matches('#') {
                stripped if stripped.is_empty() || stripped.ends_with(' ') => stripped.trim_end(),
                _ => title,
            };
            let base = slug(title);
            let count = seen.entry(base.clone()).or_insert(0);
            let anchor = if *count == 0 {
                base.clone()
            } else {
                format!("{base}-{count}")
            };
            *count += 1;
            found.insert(anchor);
        }
        for attribute in ["id=\"", "name=\""] {
            let mut rest = line.as_str();
            while let Some(at) = rest.find("<a ") {
                let tag = &rest[at..rest[at..].find('>').map_or(rest.len(), |end| at + end)];
                if let Some(start) = tag.find(attribute) {
                    let value = &tag[start + attribute.len()..];
                    if let Some(end) = value.find('"') {
                        found.insert(value[..end].to_string());
                    }
                }
                rest = &rest[at + 3..];
            }
        }
    }
    found
}

/// What is wrong with one link of `file`, if anything.
fn check_link(file: &Path, target: &str) -> Option<String> {
    let external = ["http://", "https://", "mailto:"];
    if target.is_empty() || external.iter().any(|scheme| target.starts_with(scheme)) {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let destination = if path.is_empty() {
        file.to_path_buf()
    } else {
        file.parent().unwrap().join(path)
    };
    if !destination.exists() {
        return Some(format!("`{target}`: there is no {}", shown(&destination)));
    }
    let anchor = anchor.filter(|anchor| !anchor.is_empty())?;
    if destination.extension().is_none_or(|ext| ext != "md") {
        return Some(format!(
            "`{target}`: an anchor into a file that is not markdown"
        ));
    }
    let known = anchors(&read(&destination));
    (!known.contains(anchor)).then(|| {
        format!(
            "`{target}`: {} has no heading `#{anchor}`; its anchors are {}",
            shown(&destination),
            known.into_iter().collect::<Vec<_>>().join(", ")
        )
    })
}

#[test]
fn every_relative_link_lands_on_a_file_and_a_heading() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in checked_files() {
        for target in links(&read(&file)) {
            checked += 1;
            if let Some(problem) = check_link(&file, &target) {
                broken.push(format!("{}: {problem}", shown(&file)));
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} links found: is the parser reading them?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_include_finds_its_file_and_anchor() {
    let mut broken = Vec::new();
    for chapter in chapters() {
        let text = read(&chapter);
        let mut rest = text.as_str();
        while let Some(at) = rest.find("{{#include ") {
            let directive = &rest[at + "{{#include ".len()..];
            let end = directive.find("}}").expect("an include ends with }}");
            let argument = directive[..end].trim();
            let (path, anchor) = match argument.split_once(':') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (argument, None),
            };
            let included = chapter.parent().unwrap().join(path);
            match std::fs::read_to_string(&included) {
                Err(err) => broken.push(format!("{}: `{argument}`: {err}", shown(&chapter))),
                // A line range (`:10:20`) needs no anchor; a name does, both its ends.
                Ok(body) => {
                    if let Some(name) =
                        anchor.filter(|a| !a.starts_with(|c: char| c.is_ascii_digit()))
                    {
                        let marks = |mark: &str| {
                            body.lines().any(|line| {
                                line.split_once(mark).is_some_and(|(_, after)| {
                                    after.split_whitespace().next() == Some(name)
                                })
                            })
                        };
                        if !marks("ANCHOR:") || !marks("ANCHOR_END:") {
                            broken.push(format!(
                                "{}: `{argument}`: {} has no `ANCHOR: {name}` ... `ANCHOR_END: {name}`",
                                shown(&chapter),
                                shown(&included)
                            ));
                        }
                    }
                }
            }
            rest = &directive[end..];
        }
    }
    assert!(broken.is_empty(), "broken includes:\n{}", broken.join("\n"));
}

#[test]
fn the_summary_lists_every_chapter_and_only_chapters() {
    let src = root().join("docs/src");
    let summary = src.join("SUMMARY.md");
    let listed: BTreeSet<PathBuf> = links(&read(&summary))
        .into_iter()
        .filter(|target| !target.is_empty())
        .map(|target| src.join(target.split('#').next().unwrap()))
        .collect();
    let missing: Vec<_> = listed
        .iter()
        .filter(|path| !path.exists())
        .map(|path| shown(path))
        .collect();
    assert!(
        missing.is_empty(),
        "SUMMARY.md lists chapters that do not exist: {missing:?}"
    );
    let unlisted: Vec<_> = chapters()
        .into_iter()
        .filter(|path| *path != summary && !listed.contains(path))
        .map(|path| shown(&path))
        .collect();
    assert!(
        unlisted.is_empty(),
        "chapters SUMMARY.md does not list: {unlisted:?}"
    );
}

#[test]
fn the_readme_stays_short() {
    let words = read(&root().join("README.md")).split_whitespace().count();
    assert!(
        words <= 4500,
        "the README has {words} words; at most 4,500: move reference material into docs/src/"
    );
}

#[test]
fn slugs_and_links_are_read_the_way_github_reads_them() {
    assert_eq!(
        slug("Security: the threat model"),
        "security-the-threat-model"
    );
    assert_eq!(
        slug("`plugin.pre_install`: no plugin gets the network"),
        "pluginpre_install-no-plugin-gets-the-network"
    );
    assert_eq!(
        slug("Figures: Canopy beside adnanh/webhook"),
        "figures-canopy-beside-adnanhwebhook"
    );
    assert_eq!(slug("See [the API](http-api.md) now"), "see-the-api-now");
    let twice = "# A\n\n## Notes\n\n```sh\n# Notes\n```\n\n## Notes\n";
    let found = anchors(twice);
    assert!(found.contains("notes") && found.contains("notes-1") && !found.contains("notes-2"));
    let text =
        "[a](one.md) `[b](two.md)` ``[c](three.md)``\n\n```\n[d](four.md)\n```\n[e]: five.md";
    assert_eq!(links(text), ["one.md", "five.md"]);
}
