//! The API's OpenAPI document: what `canopy api schema` prints is what the daemon serves, it
//! describes every operation completely, and what the CLI's `--json` prints (the API's answer,
//! unchanged) matches the answer schema the document gives for its route.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::{Value, json};
use support::{CANOPY, Daemon, git_repo};

/// What `canopy api schema --format FORMAT` prints (no daemon).
fn printed(format: &str) -> String {
    let out = Command::new(CANOPY)
        .args(["api", "schema", "--format", format])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The document as `canopy api schema` prints it.
fn printed_document() -> Value {
    serde_json::from_str(&printed("json")).unwrap()
}

const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

/// Every operation: (method, path, operation).
fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in METHODS {
            if let Some(op) = item.get(method) {
                ops.push((method.to_string(), path.clone(), op.clone()));
            }
        }
    }
    ops
}

/// Every `$ref` in `value`.
fn refs(value: &Value, found: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("$ref", Value::String(target)) => {
                        found.insert(target.clone());
                    }
                    _ => refs(value, found),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, found)),
        _ => {}
    }
}

#[test]
fn the_document_is_what_the_daemon_serves_and_describes_every_operation_completely() {
    let doc = printed_document();
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        doc["components"]["securitySchemes"]["bearerAuth"]["scheme"],
        "bearer"
    );

    let daemon = Daemon::start();
    let (status, served) = daemon.get("/api/openapi.json");
    assert_eq!(status, 200);
    assert_eq!(served, doc, "the served document is the printed one");
    // The document is behind the token like every route.
    let refused = daemon.raw("GET", "/api/openapi.json", &[("Host", daemon.host())], b"");
    assert_eq!(refused.status, 401);

    let ops = operations(&doc);
    assert!(ops.len() >= 60, "only {} operations", ops.len());
    let mut ids = BTreeSet::new();
    for (method, path, op) in &ops {
        let at = format!("{} {path}", method.to_uppercase());
        let id = op["operationId"]
            .as_str()
            .unwrap_or_else(|| panic!("{at}: no operationId"));
        assert!(ids.insert(id.to_string()), "{at}: operationId `{id}` twice");
        let responses = op["responses"].as_object().unwrap();
        assert!(
            responses.keys().any(|code| code.starts_with('2')),
            "{at}: no success answer: {responses:?}"
        );
        assert_eq!(
            op["responses"]["default"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/ErrorBody",
            "{at}: the error answer"
        );
        // Each `{name}` of the template is a documented path parameter.
        for segment in path.split('/') {
            if let Some(name) = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                let documented = op["parameters"].as_array().is_some_and(|params| {
                    params
                        .iter()
                        .any(|p| p["name"] == name && p["in"] == "path" && p["required"] == true)
                });
                assert!(
                    documented,
                    "{at}: path parameter `{name}` is not documented"
                );
            }
        }
        // An answer that is JSON has a schema that says something.
        for (code, answer) in responses {
            if let Some(schema) = answer.pointer("/content/application~1json/schema") {
                assert!(
                    schema != &json!({}) && schema != &json!(true),
                    "{at} {code}: the answer's schema is empty"
                );
            }
        }
    }

    // Every reference resolves.
    let mut targets = BTreeSet::new();
    refs(&doc, &mut targets);
    assert!(targets.len() > 50, "{targets:?}");
    for target in targets {
        let pointer = target.strip_prefix('#').unwrap();
        assert!(
            doc.pointer(pointer).is_some(),
            "`{target}` points at nothing"
        );
    }

    // Links lead from what an answer created to what takes it next, and land on operations.
    let links = &doc["paths"]["/api/specs"]["post"]["responses"]["201"]["links"];
    assert_eq!(links["GetSpec"]["operationId"], "get_spec", "{links}");
    assert_eq!(links["GetSpec"]["parameters"]["id"], "$response.body#/id");
    for (_, _, op) in &ops {
        for answer in op["responses"].as_object().unwrap().values() {
            for (name, link) in answer["links"].as_object().into_iter().flatten() {
                assert!(
                    ids.contains(link["operationId"].as_str().unwrap()),
                    "link {name} leads to no operation: {link}"
                );
            }
        }
    }

    // Every JSON request body has examples, and every example in the document is an instance
    // of its schema (a misspelt field fails: the request types refuse unknown fields).
    for (method, path, op) in &ops {
        if let Some(schema) = op.pointer("/requestBody/content/application~1json/schema") {
            let name = schema["$ref"].as_str().unwrap_or_default();
            let name = name.rsplit('/').next().unwrap();
            let examples = &doc["components"]["schemas"][name]["examples"];
            assert!(
                examples.as_array().is_some_and(|e| !e.is_empty()),
                "{} {path}: the request body `{name}` has no example",
                method.to_uppercase()
            );
        }
    }
    let mut checked = 0;
    for (name, schema) in doc["components"]["schemas"].as_object().unwrap() {
        for example in schema["examples"].as_array().into_iter().flatten() {
            assert_instance_of(&doc, &format!("#/components/schemas/{name}"), example);
            checked += 1;
        }
    }
    assert!(checked >= 25, "only {checked} examples");

    // The streams say they are streams.
    for path in ["/api/feed", "/api/sessions/{id}/inbox"] {
        let answer = &doc["paths"][path]["get"]["responses"]["200"]["content"];
        assert!(
            answer.get("text/event-stream").is_some(),
            "{path}: {answer}"
        );
    }
}

/// Checks `instance` against the schema the document gives the answer `code` of `method path`.
fn assert_answer_matches(doc: &Value, method: &str, path: &str, code: &str, instance: &Value) {
    // A JSON pointer, its `{` and `}` percent-encoded as a URI fragment must be.
    let escape = |s: &str| {
        s.replace('~', "~0")
            .replace('/', "~1")
            .replace('{', "%7B")
            .replace('}', "%7D")
    };
    let pointer = format!(
        "#/paths/{}/{method}/responses/{code}/content/application~1json/schema",
        escape(path)
    );
    let unescaped = pointer[1..].replace("%7B", "{").replace("%7D", "}");
    assert!(
        doc.pointer(&unescaped).is_some(),
        "{method} {path} has no {code} JSON answer"
    );
    assert_instance_of(doc, &pointer, instance);
}

/// Checks `instance` against the schema at `pointer` (a URI fragment) of the document.
fn assert_instance_of(doc: &Value, pointer: &str, instance: &Value) {
    // The whole document is the schema's resource, so `#/components/...` references resolve.
    let mut schema = doc.clone();
    schema["$ref"] = json!(pointer);
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .build(&schema)
        .unwrap();
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|err| format!("{} at {}", err, err.instance_path))
        .take(5)
        .collect();
    assert!(
        errors.is_empty(),
        "{pointer}: the instance does not match its schema: {errors:#?}\n{instance:#}"
    );
}

#[test]
fn what_the_cli_prints_with_json_matches_the_documented_answers() {
    let doc = printed_document();
    let daemon = Daemon::start();
    let repo = git_repo();
    let spec = daemon.add_spec("documented");
    daemon.create_graph(json!({
        "name": "doc",
        "workdir": repo.path(),
        "nodes": [{ "name": "build", "command": "true" }],
        "specs": [spec],
        "hooks": { "on_completed": [{ "command": "true" }] },
    }));
    daemon.ok(&["graph", "run", "doc", "--wait"]);
    daemon.ended_hook_runs("graph", 1);
    daemon.ok(&["queue", "create", "q", "documented"]);
    let run_id = daemon.json(&["run", "list"])["runs"][0]["id"]
        .as_str()
        .map(str::to_string);

    let reads: [(&[&str], &str); 14] = [
        (&["spec", "list"], "/api/specs"),
        (&["graph", "list"], "/api/graphs"),
        (&["graph", "get", "doc"], "/api/graphs/{name}"),
        (&["run", "list"], "/api/runs"),
        (&["queue", "list"], "/api/queues"),
        (&["hooks", "runs"], "/api/hook-runs"),
        (&["hooks", "events"], "/api/hooks/events"),
        (&["session", "list"], "/api/sessions"),
        (&["feed"], "/api/feed"),
        (&["cron", "list"], "/api/crons"),
        (&["plugin", "list"], "/api/plugins"),
        (&["status"], "/api/status"),
        (&["webhooks", "list"], "/api/webhooks"),
        (&["profile", "list"], "/api/profiles"),
    ];
    for (args, path) in reads {
        let printed = daemon.json(args);
        assert_answer_matches(&doc, "get", path, "200", &printed);
    }
    let run_id = run_id.expect("a run is listed");
    let (status, run) = daemon.get(&format!("/api/runs/{run_id}"));
    assert_eq!(status, 200);
    assert_answer_matches(&doc, "get", "/api/runs/{id}", "200", &run);

    // Answers with their own status, and an error, match too.
    let (status, created) = daemon.send(
        "POST",
        "/api/specs",
        &json!({ "name": "another", "body": support::spec_body("another") }),
    );
    assert_eq!(status, 201, "{created}");
    assert_answer_matches(&doc, "post", "/api/specs", "201", &created);
    let (status, missing) = daemon.get("/api/graphs/nowhere");
    assert_eq!(status, 404);
    assert_answer_matches(&doc, "get", "/api/graphs/{name}", "default", &missing);
}

/// The test venv's Python, which must have `module` (`.ci/run` installs `package`).
fn venv_python_with(module: &str, package: &str) -> std::path::PathBuf {
    let python = support::python();
    let has = Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        has,
        "{module} is not in the test venv; .ci/run installs it: `target/test-venv/bin/pip install '{package}'`"
    );
    python
}

/// Schemathesis (from the test venv) against a live daemon, every route but the two that end
/// the test's own access (`shutdown`, `rotate-token`) and the two whose `follow=true` answer
/// is an endless stream (the feed, a session's inbox; their JSON answers are checked above):
/// no 5xx, every status and every answer as documented, stateful sequences included. The
/// daemon runs with an empty `PATH`, so the commands fuzzed graphs and hooks name cannot run.
#[test]
fn schemathesis_finds_no_server_error_and_no_answer_off_its_schema() {
    let python = venv_python_with("schemathesis", "schemathesis==4.32.5");
    let empty = tempfile::tempdir().unwrap();
    let daemon = Daemon::start_with_env("", &[("PATH", empty.path().to_str().unwrap())]);
    // Something to find: a spec, a graph over it, a queue.
    let spec = daemon.add_spec("fuzzed");
    daemon.create_graph(json!({
        "name": "fuzzed",
        "workdir": empty.path(),
        "nodes": [{ "name": "build", "command": "true" }],
        "specs": [spec],
    }));
    daemon.ok(&["queue", "create", "fuzzq", "fuzzed"]);
    let url = format!("http://{}/api/openapi.json", daemon.host());
    // Schemathesis keeps a cache in its working directory.
    let scratch = tempfile::tempdir().unwrap();
    let out = Command::new(&python)
        .current_dir(scratch.path())
        .args(["-m", "schemathesis.cli", "run", &url])
        .args(["-H", &format!("Authorization: Bearer {}", daemon.token())])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
            "--max-examples",
            "15",
            "--seed",
            "1",
            "--request-timeout",
            "20",
            "--max-response-time",
            "20",
            "--exclude-operation-id-regex",
            "^(shutdown|rotate_token|feed|inbox)$",
            "--no-color",
        ])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis found problems:\n{report}\n{}\n--- daemon log (tail):\n{}",
        String::from_utf8_lossy(&out.stderr),
        daemon
            .log()
            .lines()
            .rev()
            .take(40)
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(report.contains("passed"), "{report}");
    // The daemon answers still.
    assert_eq!(daemon.get("/api/status").0, 200);
}

/// A Python client generated from the document (openapi-python-client, in the test venv; built
/// here, not kept) runs the quick start as an outside user would: spec, graph, run, watch.
#[test]
fn a_python_client_generated_from_the_document_runs_the_quick_start() {
    let python = venv_python_with("openapi_python_client", "openapi-python-client==0.29.1");
    let venv_bin = python.parent().unwrap().to_path_buf();
    let scratch = tempfile::tempdir().unwrap();
    let schema = scratch.path().join("openapi.json");
    std::fs::write(&schema, printed_document().to_string()).unwrap();
    // The generator formats with ruff, which the venv has beside it.
    let path = format!(
        "{}:{}",
        venv_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let generated = Command::new(&python)
        .args(["-m", "openapi_python_client", "generate", "--path"])
        .arg(&schema)
        .arg("--output-path")
        .arg(scratch.path().join("canopy_client"))
        .args(["--meta", "none", "--fail-on-warning"])
        .current_dir(scratch.path())
        .env("PATH", &path)
        .output()
        .unwrap();
    assert!(
        generated.status.success(),
        "the generator refused the document:\n{}{}",
        String::from_utf8_lossy(&generated.stdout),
        String::from_utf8_lossy(&generated.stderr)
    );

    let daemon = Daemon::start();
    let repo = git_repo();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/python_client_quick_start.py");
    let out = Command::new(&python)
        .arg(&script)
        .arg(format!("http://{}", daemon.host()))
        .arg(daemon.token())
        .arg(repo.path())
        .env("PYTHONPATH", scratch.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the quick start through the Python client failed:\n{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("ended completed completed"), "{said}");
    assert!(said.contains("error not_found"), "{said}");
    // What the client did is what the daemon recorded.
    let view = daemon.json(&["graph", "get", "py"]);
    assert_eq!(view["current_run"]["status"], "completed", "{view}");
}

/// The manual carries the document and its reference page made from it, as this build makes
/// them: a route changed without them fails here, naming the command that brings them up to
/// date.
#[test]
fn the_manual_has_this_builds_document_and_reference_page() {
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src");
    let update = "canopy api schema > docs/src/openapi.json && canopy api schema --format markdown > docs/src/api-reference.md";
    for (file, format) in [("openapi.json", "json"), ("api-reference.md", "markdown")] {
        let kept = std::fs::read_to_string(docs.join(file)).unwrap_or_default();
        assert!(
            kept == printed(format),
            "docs/src/{file} is not this build's; bring it up to date: {update}"
        );
    }
    let page = printed("markdown");
    assert!(page.contains("### `GET /api/graphs/{name}`"), "{page}");
    assert!(page.contains("### GraphView"), "{page}");
}

#[test]
fn the_manuals_route_table_names_every_route_of_the_document_and_no_other() {
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src");
    let page = std::fs::read_to_string(docs.join("http-api.md")).unwrap();
    let start = page
        .find("## Routes")
        .expect("http-api.md has its Routes section");
    let rest = &page[start..];
    let table: String = rest
        .lines()
        .skip(1)
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .collect::<Vec<_>>()
        .join("\n");
    // The routes a row names: the first cell's `METHOD /path` spans, query strings left out.
    let mut named = BTreeSet::new();
    for row in table.lines().skip(2) {
        let first = row.trim_start_matches('|').split(" | ").next().unwrap();
        for span in first.split('`').skip(1).step_by(2) {
            if let Some((_, path)) = span.split_once(' ')
                && path.starts_with("/api/")
            {
                let path = path.split(['?', '[']).next().unwrap();
                named.insert(path.to_string());
            }
        }
    }
    let doc = printed_document();
    let documented: BTreeSet<String> = doc["paths"].as_object().unwrap().keys().cloned().collect();
    let missing: Vec<_> = documented.difference(&named).collect();
    assert!(
        missing.is_empty(),
        "routes of the document the manual's table does not name: {missing:?}"
    );
    let stray: Vec<_> = named
        .difference(&documented)
        .filter(|path| path.as_str() != "/api/openapi.json")
        .collect();
    assert!(
        stray.is_empty(),
        "routes the manual's table names that the API does not have: {stray:?}"
    );
}
