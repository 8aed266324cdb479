//! The MCP tools: each is a name, a description an agent can act on, an input schema generated
//! from the API's own request types, and the API call its arguments become. Arguments are
//! passed on as they came (the route's fields in the body or the query string), so the API
//! validates them and its error, which names the field, is the tool's error.

#![allow(dead_code)] // The parameter types exist for their schemas; nothing builds them.

use std::time::Duration;

use axum::http::Method;
use schemars::JsonSchema;
use serde_json::{Map, Value};

use canopy_client::encode;
use canopy_core::engine::{ControlRequest, GraphInput, NewQueue, NewSpec, SpecPatch};
use canopy_model::requests::feed::FeedParams;
use canopy_model::requests::graphs::GraphQuery;
use canopy_model::requests::hooks::{HookRunsQuery, HookTestBody};
use canopy_model::requests::queues::{AddSpec, Reorder, SetGroup};
use canopy_model::requests::sessions::{SendBody, SessionListQuery};
use canopy_model::requests::specs::SpecQuery;

/// How long a tool's API call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `hooks_test` with `execute` may take (the API waits up to 10 minutes for the hooks).
const EXECUTE_TIMEOUT: Duration = Duration::from_secs(11 * 60);

/// One API call a tool makes.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub method: Method,
    pub path: String,
    pub body: Option<Value>,
    pub timeout: Duration,
}

/// A tool.
#[derive(Debug, Clone, Copy)]
pub struct ToolDef {
    pub name: &'static str,
    pub description: &'static str,
    /// The input schema.
    pub schema: fn() -> schemars::Schema,
    /// Changes nothing.
    pub read_only: bool,
    /// The API call the arguments make; an error names the argument that is wrong.
    pub route: fn(Args) -> Result<Call, String>,
}

/// A tool's arguments: those that pick the resource (`graph`, `spec`, ...) are taken out; the
/// rest go to the API unchanged.
#[derive(Debug, Clone, Default)]
pub struct Args(Map<String, Value>);

impl Args {
    pub fn new(arguments: Option<Map<String, Value>>) -> Self {
        Self(arguments.unwrap_or_default())
    }

    /// A required string argument, taken out; `what` says what it names.
    fn take(&mut self, name: &str, what: &str) -> Result<String, String> {
        match self.0.remove(name) {
            Some(Value::String(text)) if !text.trim().is_empty() => Ok(text),
            Some(Value::String(_)) => Err(format!("field `{name}` is empty; give {what}")),
            None | Some(Value::Null) => Err(format!("field `{name}` is required: {what}")),
            Some(other) => Err(format!(
                "field `{name}` must be a string ({what}), got {other}"
            )),
        }
    }

    /// The remaining arguments as a JSON body.
    fn body(self) -> Value {
        Value::Object(self.0)
    }

    /// The remaining arguments as a query string (`?a=1&b=x`, or empty).
    fn query(self) -> Result<String, String> {
        let mut query = form_urlencoded::Serializer::new(String::new());
        let mut any = false;
        for (name, value) in self.0 {
            let text = match value {
                Value::Null => continue,
                Value::String(text) => text,
                Value::Bool(flag) => flag.to_string(),
                Value::Number(number) => number.to_string(),
                other => {
                    return Err(format!(
                        "field `{name}` must be a string, a number or a boolean, got {other}"
                    ));
                }
            };
            query.append_pair(&name, &text);
            any = true;
        }
        Ok(if any {
            format!("?{}", query.finish())
        } else {
            String::new()
        })
    }
}

fn call(method: Method, path: String, body: Option<Value>) -> Call {
    Call {
        method,
        path,
        body,
        timeout: CALL_TIMEOUT,
    }
}

fn get(path: String, args: Args) -> Result<Call, String> {
    Ok(call(Method::GET, format!("{path}{}", args.query()?), None))
}

fn schema<T: JsonSchema>() -> schemars::Schema {
    let mut schema = schemars::schema_for!(T);
    // A request type's examples are of the HTTP body; a tool flattens it beside its own fields
    // (`graph`, `queue`), so they would be examples of a call that lacks them.
    schema.remove("examples");
    schema
}

const GRAPH: &str = "the graph's name, id or unique id prefix";
const SPEC: &str = "the spec's id or a unique id prefix";
const QUEUE: &str = "the queue's name, id or unique id prefix";

/// No arguments.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

/// `graph_get`: the graph, and which page of its per-spec lists.
#[derive(JsonSchema)]
struct GraphGet {
    /// The graph: its name, id or unique id prefix.
    graph: String,
    #[serde(flatten)]
    page: GraphQuery,
}

/// What `graph_edit` does.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum EditAction {
    /// Create a graph from the fields given (`name`, `workdir` and `nodes` required).
    Create,
    /// Change the fields given on `graph`; the rest stay.
    Update,
    /// Delete `graph` (its history goes with it).
    Delete,
}

/// `graph_edit`: the action, the graph it is about, and the API's graph fields.
#[derive(JsonSchema)]
struct GraphEdit {
    /// `create`, `update` or `delete`.
    action: EditAction,
    /// update, delete: the graph, by name, id or unique id prefix.
    #[serde(default)]
    graph: Option<String>,
    #[serde(flatten)]
    input: GraphInput,
}

/// `graph_control`: the graph, and what to do with it.
#[derive(JsonSchema)]
struct GraphControl {
    /// The graph: its name, id or unique id prefix.
    graph: String,
    #[serde(flatten)]
    request: ControlRequest,
}

/// `spec_get`: which spec.
#[derive(JsonSchema)]
struct SpecGet {
    /// The spec: its id or a unique id prefix.
    spec: String,
}

/// `spec_update`: the spec, and the fields to change.
#[derive(JsonSchema)]
struct SpecUpdate {
    /// The spec: its id or a unique id prefix.
    spec: String,
    #[serde(flatten)]
    patch: SpecPatch,
}

/// `queue_show`: which queue.
#[derive(JsonSchema)]
struct QueueShow {
    /// The queue: its name, id or unique id prefix.
    queue: String,
}

/// `queue_add`: the queue, the spec, and its group.
#[derive(JsonSchema)]
struct QueueAdd {
    /// The queue: its name, id or unique id prefix.
    queue: String,
    #[serde(flatten)]
    add: AddSpec,
}

/// `queue_reorder`: the queue and its new order.
#[derive(JsonSchema)]
struct QueueReorder {
    /// The queue: its name, id or unique id prefix.
    queue: String,
    #[serde(flatten)]
    order: Reorder,
}

/// `queue_group`: the queue, the member, and its group.
#[derive(JsonSchema)]
struct QueueGroup {
    /// The queue: its name, id or unique id prefix.
    queue: String,
    /// The member: its spec's id or a unique id prefix.
    spec: String,
    #[serde(flatten)]
    group: SetGroup,
}

/// `hooks_test`: the graph, and the dry run to make.
#[derive(JsonSchema)]
struct HooksTest {
    /// The graph: its name, id or unique id prefix.
    graph: String,
    #[serde(flatten)]
    test: HookTestBody,
}

/// `session_send`: the session, and the message.
#[derive(JsonSchema)]
struct SessionSend {
    /// The live session: its id, a unique id prefix or its name.
    session: String,
    #[serde(flatten)]
    message: SendBody,
}

/// Every tool, in the order `tools/list` gives them.
pub const TOOLS: &[ToolDef] = &[
    ToolDef {
        name: "graph_list",
        description: "List every graph: name, id, status (idle, running, paused, completed, failed), blocker, workdir, version. Use graph_get for one graph's run and specs.",
        schema: schema::<NoArgs>,
        read_only: true,
        route: |args| get("/api/graphs".into(), args),
    },
    ToolDef {
        name: "graph_get",
        description: "One graph as `canopy graph get` shows it: status, blocker, warnings (consistency_warning), nodes, hooks, the latest run with what happened to each spec (queue-driven progress reconstructed from the run history), and completion_hook_runs. Poll it until `graph.status` is no longer `running` to wait for a run. Long runs list specs a page at a time (`offset`, `limit`).",
        schema: schema::<GraphGet>,
        read_only: true,
        route: |mut args| {
            let graph = args.take("graph", GRAPH)?;
            get(format!("/api/graphs/{}", encode(&graph)), args)
        },
    },
    ToolDef {
        name: "graph_edit",
        description: "Create, update or delete a graph. create: `name`, `workdir` (absolute path, best a git repository) and `nodes` (ordered executor configs, e.g. {\"name\": \"test\", \"command\": \"cargo test\"}), optional `specs`, `hooks`, `allow_dirty_start`. update: `graph` plus only the fields to change; `hooks` is a map event -> ordered hook configs (events named replace that event's hooks, `[]` removes them), e.g. {\"on_completed\": [{\"command\": \"notify-send done\"}]}. While a run is active the answer's `remaining_events` names the events still to come, which the new hooks will serve. `version` (from graph_get) refuses the edit if the graph changed since. delete: `graph`. The answer is the graph as graph_get shows it.",
        schema: schema::<GraphEdit>,
        read_only: false,
        route: |mut args| {
            let action = match args.0.remove("action") {
                Some(Value::String(action)) => action,
                None | Some(Value::Null) => {
                    return Err(
                        "field `action` is required: `create`, `update` or `delete`".to_string()
                    );
                }
                Some(other) => {
                    return Err(format!(
                        "field `action` must be `create`, `update` or `delete`, got {other}"
                    ));
                }
            };
            match action.as_str() {
                "create" => {
                    if args.0.contains_key("graph") {
                        return Err("field `graph` names the graph to update or delete; a new graph's name is `name`".to_string());
                    }
                    Ok(call(Method::POST, "/api/graphs".into(), Some(args.body())))
                }
                "update" => {
                    let graph = args.take("graph", GRAPH)?;
                    let path = format!("/api/graphs/{}", encode(&graph));
                    Ok(call(Method::PATCH, path, Some(args.body())))
                }
                "delete" => {
                    let graph = args.take("graph", GRAPH)?;
                    if let Some(field) = args.0.keys().next() {
                        return Err(format!("field `{field}`: delete takes only `graph`"));
                    }
                    Ok(call(
                        Method::DELETE,
                        format!("/api/graphs/{}", encode(&graph)),
                        None,
                    ))
                }
                other => Err(format!(
                    "field `action` must be `create`, `update` or `delete`, got `{other}`"
                )),
            }
        },
    },
    ToolDef {
        name: "graph_control",
        description: "Start, reset or continue a graph's run. run: over the bound specs, or over a queue's pending members with `queue_id`; `workdir` overrides the graph's for this run. reset: back to idle (history stays). continue: resume a paused run; `mode` `run_from_node` (with `node`) starts the stopped spec at that node, `skip_next_spec` skips it. Answers at once with the graph as graph_get shows it; poll graph_get to follow the run.",
        schema: schema::<GraphControl>,
        read_only: false,
        route: |mut args| {
            let graph = args.take("graph", GRAPH)?;
            let path = format!("/api/graphs/{}/control", encode(&graph));
            Ok(call(Method::POST, path, Some(args.body())))
        },
    },
    ToolDef {
        name: "spec_add",
        description: "Add a spec to the backlog. `body` must be in the tagged <spec> format with all seven section tags (<objective>, <functional_requirements>, <non_functional_requirements>, <constraints>, <guidelines>, <in_scope>, <out_of_scope>); a body that does not parse is refused naming the tag. Answers with the spec and its id.",
        schema: schema::<NewSpec>,
        read_only: false,
        route: |args| Ok(call(Method::POST, "/api/specs".into(), Some(args.body()))),
    },
    ToolDef {
        name: "spec_list",
        description: "List backlog specs (id, name, workdir tag, whether it needs conversion), optionally only those tagged to `workdir`.",
        schema: schema::<SpecQuery>,
        read_only: true,
        route: |args| get("/api/specs".into(), args),
    },
    ToolDef {
        name: "spec_get",
        description: "One spec with its body.",
        schema: schema::<SpecGet>,
        read_only: true,
        route: |mut args| {
            let spec = args.take("spec", SPEC)?;
            get(format!("/api/specs/{}", encode(&spec)), args)
        },
    },
    ToolDef {
        name: "spec_update",
        description: "Change a spec's `name`, `body` (tagged <spec> format) or `workdir` tag (null clears it); fields not given stay.",
        schema: schema::<SpecUpdate>,
        read_only: false,
        route: |mut args| {
            let spec = args.take("spec", SPEC)?;
            let path = format!("/api/specs/{}", encode(&spec));
            Ok(call(Method::PATCH, path, Some(args.body())))
        },
    },
    ToolDef {
        name: "queue_create",
        description: "Create a spec queue: a unique `name` and optional initial `specs` (ids or prefixes) in order. Run a graph over it with graph_control run `queue_id`.",
        schema: schema::<NewQueue>,
        read_only: false,
        route: |args| Ok(call(Method::POST, "/api/queues".into(), Some(args.body()))),
    },
    ToolDef {
        name: "queue_add",
        description: "Add a spec to a queue, optionally in a context `group` (lands right after the group's last pending member; grouped specs share a warm agent session).",
        schema: schema::<QueueAdd>,
        read_only: false,
        route: |mut args| {
            let queue = args.take("queue", QUEUE)?;
            let path = format!("/api/queues/{}/specs", encode(&queue));
            Ok(call(Method::POST, path, Some(args.body())))
        },
    },
    ToolDef {
        name: "queue_reorder",
        description: "Reorder a queue: `order` lists every member's spec in the new order. An order that would split a group's pending members is refused (naming the positions) and changes nothing.",
        schema: schema::<QueueReorder>,
        read_only: false,
        route: |mut args| {
            let queue = args.take("queue", QUEUE)?;
            let path = format!("/api/queues/{}/order", encode(&queue));
            Ok(call(Method::PUT, path, Some(args.body())))
        },
    },
    ToolDef {
        name: "queue_group",
        description: "Set a queue member's context `group` (it moves next to its group), or null to take it out of any group.",
        schema: schema::<QueueGroup>,
        read_only: false,
        route: |mut args| {
            let queue = args.take("queue", QUEUE)?;
            let spec = args.take("spec", SPEC)?;
            let path = format!(
                "/api/queues/{}/specs/{}/group",
                encode(&queue),
                encode(&spec)
            );
            Ok(call(Method::PUT, path, Some(args.body())))
        },
    },
    ToolDef {
        name: "queue_show",
        description: "A queue's members in order: spec, name, group, and status (pending, or completed / skipped naming the run).",
        schema: schema::<QueueShow>,
        read_only: true,
        route: |mut args| {
            let queue = args.take("queue", QUEUE)?;
            get(format!("/api/queues/{}", encode(&queue)), args)
        },
    },
    ToolDef {
        name: "hooks_runs",
        description: "Hook runs, newest first: which hook served which event, its status, outcome, output and the exact config that fired. Filter by `graph`, `event`, `status`, `outcome`, `source`, `hook`, `since`; `last` caps the count.",
        schema: schema::<HookRunsQuery>,
        read_only: true,
        route: |args| get("/api/hook-runs".into(), args),
    },
    ToolDef {
        name: "hooks_test",
        description: "Dry-run a graph's hooks for an `event` (on_completed, on_failed, on_blocked, on_spec_completed) built from its latest run (or `run`): shows each hook's rendered config and markers. With `execute: true` the hooks really run and the answer waits for them (up to 10 minutes).",
        schema: schema::<HooksTest>,
        read_only: false,
        route: |mut args| {
            let graph = args.take("graph", GRAPH)?;
            let execute = args.0.get("execute") == Some(&Value::Bool(true));
            let path = format!("/api/graphs/{}/hooks/test", encode(&graph));
            let mut call = call(Method::POST, path, Some(args.body()));
            if execute {
                call.timeout = EXECUTE_TIMEOUT;
            }
            Ok(call)
        },
    },
    ToolDef {
        name: "session_list",
        description: "Interactive sessions (live ones; `all` for finished ones too): id, name, status, tmux target. Interactive hooks target them by id or name.",
        schema: schema::<SessionListQuery>,
        read_only: true,
        route: |args| get("/api/sessions".into(), args),
    },
    ToolDef {
        name: "session_send",
        description: "Send a message to a live interactive session (by id, prefix or name): it is queued and delivered into the session's inbox, or typed into its tmux pane, on the daemon's next tick. Answers with the message id.",
        schema: schema::<SessionSend>,
        read_only: false,
        route: |mut args| {
            let session = args.take(
                "session",
                "the session's id, a unique id prefix or its name",
            )?;
            let path = format!("/api/sessions/{}/messages", encode(&session));
            Ok(call(Method::POST, path, Some(args.body())))
        },
    },
    ToolDef {
        name: "feed_read",
        description: "Read the feed: every event Canopy recorded (graph runs, specs, hooks, sessions, ...) with its actor, oldest first. Without `since`, the newest `last` (default 100); with `since` (a cursor such as the answer's `head`, an RFC 3339 time, or a duration like 10m) the events after it. Filter by `event` (name or glob like graph.run.*), `family`, `project`. For live changes subscribe to the canopy://graphs/{name} resource.",
        schema: schema::<FeedParams>,
        read_only: true,
        route: |args| {
            if args.0.contains_key("follow") {
                return Err("field `follow`: feed_read reads once; subscribe to a canopy://graphs/{name} or canopy://specs/{id} resource to be told of changes".to_string());
            }
            get("/api/feed".into(), args)
        },
    },
];

/// The tool named `name`.
pub fn find(name: &str) -> Option<&'static ToolDef> {
    TOOLS.iter().find(|tool| tool.name == name)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn route(name: &str, args: Value) -> Result<Call, String> {
        let Value::Object(map) = args else {
            panic!("args must be an object")
        };
        (find(name).expect("tool").route)(Args::new(Some(map)))
    }

    #[test]
    fn a_tool_passes_its_fields_to_the_route_of_its_resource() {
        let call = route(
            "graph_control",
            json!({"graph": "web app", "action": "run", "queue_id": "q1"}),
        )
        .unwrap();
        assert_eq!(call.method, Method::POST);
        assert_eq!(call.path, "/api/graphs/web%20app/control");
        assert_eq!(call.body, Some(json!({"action": "run", "queue_id": "q1"})));
        let call = route("hooks_runs", json!({"graph": "web", "last": 5})).unwrap();
        assert_eq!(call.path, "/api/hook-runs?graph=web&last=5");
        assert_eq!(route("graph_list", json!({})).unwrap().path, "/api/graphs");
    }

    #[test]
    fn a_missing_resource_argument_is_named() {
        assert_eq!(
            route("graph_get", json!({})).unwrap_err(),
            "field `graph` is required: the graph's name, id or unique id prefix"
        );
        assert_eq!(
            route("graph_edit", json!({"action": "rename"})).unwrap_err(),
            "field `action` must be `create`, `update` or `delete`, got `rename`"
        );
    }

    #[test]
    fn every_schema_is_an_object_schema_naming_its_fields() {
        for tool in TOOLS {
            let schema = serde_json::to_value((tool.schema)()).unwrap();
            assert_eq!(schema["type"], "object", "{}", tool.name);
        }
        let control = serde_json::to_value((find("graph_control").unwrap().schema)()).unwrap();
        for field in ["graph", "action", "queue_id", "workdir", "mode", "node"] {
            assert!(
                control["properties"][field].is_object(),
                "graph_control lacks {field}: {control}"
            );
        }
        assert_eq!(
            control["properties"]["mode"]["enum"],
            json!(["run_from_node", "skip_next_spec"])
        );
    }
}
