//! `canopy api schema --format markdown`: the OpenAPI document as a page of the manual
//! (`docs/src/api-reference.md`): each operation by resource with its parameters, body and
//! answers, then each schema with its fields. Plain Markdown, so the manual renders it with
//! no script and nothing fetched.

use std::fmt::Write as _;

use serde_json::Value;

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// The page for `doc`.
pub fn markdown(doc: &Value) -> String {
    let mut page = String::new();
    let version = doc["info"]["version"].as_str().unwrap_or("?");
    let _ = writeln!(page, "# API reference\n");
    let _ = writeln!(
        page,
        "Every route of the HTTP API (version {version}), made from its OpenAPI document: \
         [openapi.json](openapi.json), which `canopy api schema` prints and the daemon serves at \
         `GET /api/openapi.json`. Every request carries the daemon's token \
         (`Authorization: Bearer`); every error answer is [`ErrorBody`](#errorbody). \
         This page is generated (`canopy api schema --format markdown`); do not edit it.\n"
    );
    let paths = doc["paths"].as_object();
    let tags: Vec<&str> = doc["tags"]
        .as_array()
        .map(|tags| tags.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    for tag in tags {
        let _ = writeln!(page, "## {tag} routes\n");
        for (path, item) in paths.into_iter().flatten() {
            for method in METHODS {
                let Some(op) = item.get(method) else { continue };
                let tagged = op["tags"]
                    .as_array()
                    .is_some_and(|t| t.iter().any(|t| t == tag));
                if tagged {
                    operation(&mut page, method, path, op);
                }
            }
        }
    }
    let _ = writeln!(page, "## Schemas\n");
    if let Some(schemas) = doc["components"]["schemas"].as_object() {
        for (name, schema) in schemas {
            schema_section(&mut page, name, schema);
        }
    }
    page
}

fn operation(page: &mut String, method: &str, path: &str, op: &Value) {
    let id = op["operationId"].as_str().unwrap_or_default();
    let _ = writeln!(page, "### `{} {path}`\n", method.to_uppercase());
    let _ = writeln!(page, "Operation `{id}`.");
    if let Some(text) = op["description"].as_str().or(op["summary"].as_str()) {
        let _ = writeln!(page, "{}", one_line(text));
    }
    let _ = writeln!(page);
    if let Some(params) = op["parameters"].as_array().filter(|p| !p.is_empty()) {
        let _ = writeln!(page, "| parameter | in | type | |\n|---|---|---|---|");
        for param in params {
            let required = if param["required"] == true {
                ""
            } else {
                " (optional)"
            };
            let _ = writeln!(
                page,
                "| `{}`{required} | {} | {} | {} |",
                param["name"].as_str().unwrap_or_default(),
                param["in"].as_str().unwrap_or_default(),
                type_of(&param["schema"]),
                cell(param["description"].as_str().unwrap_or_default()),
            );
        }
        let _ = writeln!(page);
    }
    if let Some(content) = op["requestBody"]["content"].as_object() {
        let optional = if op["requestBody"]["required"] == true {
            ""
        } else {
            " (may be left out)"
        };
        for (media, body) in content {
            let _ = writeln!(
                page,
                "Body{optional}: {} (`{media}`)\n",
                type_of(&body["schema"])
            );
        }
    }
    if let Some(responses) = op["responses"].as_object() {
        let _ = writeln!(page, "| answer | type | |\n|---|---|---|");
        for (code, answer) in responses {
            let types: Vec<String> = answer["content"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(media, body)| match media.as_str() {
                    "application/json" => type_of(&body["schema"]),
                    "text/event-stream" => format!(
                        "events of {}",
                        type_of(&body["schema"]["properties"]["data"]["contentSchema"])
                    ),
                    _ => format!("`{media}`"),
                })
                .collect();
            let headers: Vec<String> = answer["headers"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(name, _)| format!("header `{name}`"))
                .collect();
            let mut description = types.join(", or ");
            if !headers.is_empty() {
                description.push_str(&format!(" ({})", headers.join(", ")));
            }
            let _ = writeln!(
                page,
                "| `{code}` | {description} | {} |",
                cell(answer["description"].as_str().unwrap_or_default())
            );
        }
        let _ = writeln!(page);
    }
}

fn schema_section(page: &mut String, name: &str, schema: &Value) {
    let _ = writeln!(page, "### {name}\n");
    if let Some(text) = schema["description"].as_str() {
        let _ = writeln!(page, "{}\n", one_line(text));
    }
    let properties = schema["properties"].as_object().filter(|p| !p.is_empty());
    let Some(properties) = properties else {
        let _ = writeln!(page, "{}\n", type_of(schema));
        examples(page, schema);
        return;
    };
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let _ = writeln!(page, "| field | type | |\n|---|---|---|");
    for (field, property) in properties {
        let optional = if required.contains(&field.as_str()) {
            ""
        } else {
            " (optional)"
        };
        let _ = writeln!(
            page,
            "| `{field}`{optional} | {} | {} |",
            type_of(property),
            cell(property["description"].as_str().unwrap_or_default())
        );
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(parts) = schema[key].as_array() {
            let parts: Vec<String> = parts.iter().map(type_of).collect();
            let _ = writeln!(page, "\nAlso ({key}): {}", cell(&parts.join(", ")));
        }
    }
    let _ = writeln!(page);
    examples(page, schema);
}

/// A schema's examples, each as a JSON block.
fn examples(page: &mut String, schema: &Value) {
    for example in schema["examples"].as_array().into_iter().flatten() {
        let text = serde_json::to_string_pretty(example).unwrap_or_default();
        let _ = writeln!(page, "Example:\n\n```json\n{text}\n```\n");
    }
}

/// A schema in a few words: `string`, `[Spec]`, [`GraphView`](#graphview), `"a" | "b"`.
fn type_of(schema: &Value) -> String {
    if let Some(target) = schema["$ref"].as_str() {
        let name = target.rsplit('/').next().unwrap_or(target);
        return format!("[`{name}`](#{})", name.to_lowercase());
    }
    if let Some(values) = schema["enum"].as_array() {
        let values: Vec<String> = values.iter().map(|v| format!("`{v}`")).collect();
        return values.join(" \\| ");
    }
    if let Some(value) = schema.get("const") {
        return format!("`{value}`");
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(parts) = schema[key].as_array() {
            let parts: Vec<String> = parts.iter().map(type_of).collect();
            let joiner = if key == "allOf" { " & " } else { " \\| " };
            return parts.join(joiner);
        }
    }
    let one = |kind: &str| match kind {
        "array" => match schema.get("prefixItems").and_then(Value::as_array) {
            Some(items) => format!(
                "[{}]",
                items.iter().map(type_of).collect::<Vec<_>>().join(", ")
            ),
            None => format!("[{}]", type_of(&schema["items"])),
        },
        "object" => match schema.get("additionalProperties") {
            Some(values) if values.is_object() => format!("{{string: {}}}", type_of(values)),
            _ => "object".to_string(),
        },
        "string" => match schema["format"].as_str() {
            Some(format) => format!("string ({format})"),
            None => "string".to_string(),
        },
        other => other.to_string(),
    };
    match &schema["type"] {
        Value::String(kind) => one(kind),
        Value::Array(kinds) => kinds
            .iter()
            .filter_map(Value::as_str)
            .map(one)
            .collect::<Vec<_>>()
            .join(" \\| "),
        _ => "any".to_string(),
    }
}

/// Text for one table cell: one line, pipes escaped.
fn cell(text: &str) -> String {
    one_line(text).replace('|', "\\|")
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn types_read_as_a_person_writes_them() {
        assert_eq!(
            super::type_of(&json!({ "$ref": "#/components/schemas/GraphView" })),
            "[`GraphView`](#graphview)"
        );
        assert_eq!(
            super::type_of(&json!({ "type": "array", "items": { "type": "string" } })),
            "[string]"
        );
        assert_eq!(
            super::type_of(&json!({ "type": ["integer", "null"] })),
            "integer \\| null"
        );
        assert_eq!(
            super::type_of(&json!({ "enum": ["run", "reset"] })),
            "`\"run\"` \\| `\"reset\"`"
        );
        assert_eq!(super::cell("a |\n b"), "a \\| b");
    }
}
