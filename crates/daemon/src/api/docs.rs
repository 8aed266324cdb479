//! The API's OpenAPI document (`GET /api/openapi.json`, `canopy api schema`), made from the
//! handlers' own types: a route's parameters, body and answers are its extractors' and return
//! type's JSON Schemas (schemars, through aide), so the document cannot drift from the code.
//!
//! What aide cannot see is added here once for every route: the path parameters of the route's
//! template (handlers take them as `Path<String>`), the error answer every route can give, the
//! bearer token, an operation id from the handler's name, and a tag from the resource.

use std::collections::HashMap;

use aide::axum::ApiRouter;
use aide::axum::routing::ApiMethodRouter;
use aide::generate::GenContext;
use aide::openapi::{
    self, MediaType, OpenApi, Operation, Parameter, ParameterData, ParameterSchemaOrContent,
    ReferenceOr, Response, SchemaObject, SecurityScheme, StatusCode as Code, Tag,
};
use aide::{OperationInput, OperationOutput};
use axum::handler::Handler;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response as HttpResponse};
use schemars::JsonSchema;
use serde::Serialize;

use super::{ApiError, ApiJson, ApiQuery, AppState};
use canopy_model::records::answers::ErrorBody;

/// The name the document gives the daemon's token scheme.
const BEARER: &str = "bearerAuth";

/// The document of every route `routes` serves, ready to serve as JSON.
pub fn document(routes: ApiRouter<AppState>) -> (axum::Router<AppState>, OpenApi) {
    let mut api = OpenApi::default();
    let router = routes.finish_api_with(&mut api, |doc| {
        doc.title("Canopy HTTP API")
            .version(env!("CARGO_PKG_VERSION"))
            .description(
                "The daemon's JSON API on loopback; the CLI, the TUI and MCP are its clients. \
                 Every request carries the daemon's token (`Authorization: Bearer <token>`, the \
                 token is in `daemon.token` in the data dir). Every error is \
                 `{\"error\": {\"code\", \"message\"}}` with a fitting status.",
            )
            .security_scheme(
                BEARER,
                SecurityScheme::Http {
                    scheme: "bearer".into(),
                    bearer_format: None,
                    description: Some(
                        "The daemon's API token: `daemon.token` in the data dir.".into(),
                    ),
                    extensions: Default::default(),
                },
            )
            .security_requirement(BEARER)
    });
    finish(&mut api);
    (router, api)
}

/// The document as JSON in OpenAPI 3.1's own dialect (JSON Schema 2020-12), which client
/// generators read: schemars writes a tuple's `items` as a list (draft 7) and an unconstrained
/// value as `true`. A tuple of one type becomes `items` with its length; of several,
/// `prefixItems`; `true` becomes `{}` (the same schema); an object default beside a
/// reference goes (an annotation, which generators choke on).
pub fn to_json(api: &OpenApi) -> serde_json::Value {
    let mut value = serde_json::to_value(api).unwrap_or_default();
    normalize(&mut value);
    value
}

fn normalize(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            if let Some(Value::Array(items)) = map.get("items").cloned() {
                let length = Value::from(items.len());
                match items.first() {
                    Some(first) if items.iter().all(|item| item == first) => {
                        map.insert("items".into(), first.clone());
                        map.insert("minItems".into(), length.clone());
                        map.insert("maxItems".into(), length);
                    }
                    _ => {
                        map.remove("items");
                        map.insert("prefixItems".into(), Value::Array(items));
                        map.insert("maxItems".into(), length);
                    }
                }
            }
            // A default that is an object beside a reference (`"origin": {"kind": "manual"}`)
            // is an annotation generators cannot read; validation does not use it.
            if map.contains_key("allOf") && map.get("default").is_some_and(Value::is_object) {
                map.remove("default");
            }
            for (key, child) in map.iter_mut() {
                let schema_position = matches!(key.as_str(), "items" | "contentSchema");
                if schema_position && *child == Value::Bool(true) {
                    *child = serde_json::json!({});
                }
                if key == "properties"
                    && let Value::Object(properties) = child
                {
                    for property in properties.values_mut() {
                        if *property == Value::Bool(true) {
                            *property = serde_json::json!({});
                        }
                    }
                }
                normalize(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        _ => {}
    }
}

/// Adds what every operation shares and aide cannot infer.
fn finish(api: &mut OpenApi) {
    let Some(paths) = api.paths.as_mut() else {
        return;
    };
    // Operation ids are handler names; a name two modules share keeps its module.
    let mut uses: HashMap<String, usize> = HashMap::new();
    for (_, item) in paths.iter() {
        if let ReferenceOr::Item(item) = item {
            for (_, op) in item.iter() {
                if let Some(id) = &op.operation_id {
                    *uses.entry(short_name(id).to_string()).or_default() += 1;
                }
            }
        }
    }
    let mut tags = Vec::new();
    for (path, item) in paths.paths.iter_mut() {
        let ReferenceOr::Item(item) = item else {
            continue;
        };
        let tag = tag_of(path);
        if !tags.contains(&tag) {
            tags.push(tag.clone());
        }
        let params = template_params(path);
        for op in operations(item) {
            if let Some(id) = op.operation_id.take() {
                let short = short_name(&id);
                op.operation_id = Some(if uses.get(short).copied().unwrap_or(0) > 1 {
                    format!("{}_{short}", module_name(&id))
                } else {
                    short.to_string()
                });
            }
            if op.tags.is_empty() {
                op.tags.push(tag.clone());
            }
            add_path_params(op, &params);
            // The guard answers every route (401, 403, 415) before its handler does.
            let responses = op.responses.get_or_insert_with(Default::default);
            if responses.default.is_none() {
                responses.default = Some(ReferenceOr::Item(error_response()));
            }
        }
        // A body aide knows only by its media type (a plugin's component): bytes.
        for op in operations(item) {
            if let Some(ReferenceOr::Item(body)) = op.request_body.as_mut() {
                for media in body.content.values_mut() {
                    if media.schema.is_none() {
                        media.schema = Some(SchemaObject {
                            json_schema: schemars::json_schema!({
                                "type": "string",
                                "format": "binary",
                                "description": "The bytes of a WebAssembly component.",
                            }),
                            example: None,
                            external_docs: None,
                        });
                    }
                }
            }
        }
        match path.as_str() {
            // A liveness probe needs no token: without one the answer is `status` alone.
            super::guard::HEALTH_PATH => {
                if let Some(op) = item.get.as_mut() {
                    op.security = vec![Default::default(), bearer()];
                }
            }
            // A launched agent's runtime calls back with its launch's secret, not the token.
            "/api/runtime/{event}" => {
                if let Some(op) = item.post.as_mut() {
                    op.security = vec![Default::default()];
                    op.description = Some(
                        "A runtime hook callback of an agent Canopy launched: \
                         `Authorization: Bearer` carries the launch's secret \
                         (CANOPY_RUNTIME_TOKEN), not the daemon's token. The body and the \
                         answer are the agent runtime's own hook JSON."
                            .into(),
                    );
                }
            }
            _ => {}
        }
    }
    add_links(paths);
    api.tags = tags
        .into_iter()
        .map(|name| Tag {
            name,
            ..Default::default()
        })
        .collect();
}

/// The security requirement of the daemon's token.
fn bearer() -> openapi::SecurityRequirement {
    [(BEARER.to_string(), Vec::new())].into_iter().collect()
}

/// The error answer every operation can give, whether its handler fails with [`ApiError`] or
/// only the guard in front of it can refuse it.
fn error_response() -> Response {
    Response {
        description: "An error: `{\"error\": {\"code\", \"message\"}}`.".into(),
        content: [(
            "application/json".to_string(),
            MediaType {
                schema: Some(SchemaObject {
                    json_schema: schemars::json_schema!({
                        "$ref": "#/components/schemas/ErrorBody"
                    }),
                    example: None,
                    external_docs: None,
                }),
                ..Default::default()
            },
        )]
        .into_iter()
        .collect(),
        ..Default::default()
    }
}

/// Every operation of a path.
fn operations(item: &mut openapi::PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.options,
        &mut item.head,
        &mut item.patch,
        &mut item.trace,
    ]
    .into_iter()
    .filter_map(Option::as_mut)
}

/// The links a client (and Schemathesis's stateful phase) follows from what one answer
/// created to what takes it next: a spec into a queue and a graph, a graph into a run, a run
/// to its record. (operation, status, link, target operation, target parameter, value)
const LINKS: &[(&str, u16, &str, &str, &str, &str)] = &[
    (
        "create_spec",
        201,
        "GetSpec",
        "get_spec",
        "id",
        "$response.body#/id",
    ),
    (
        "create_spec",
        201,
        "UpdateSpec",
        "update_spec",
        "id",
        "$response.body#/id",
    ),
    (
        "create_queue",
        201,
        "GetQueue",
        "get_queue",
        "id",
        "$response.body#/id",
    ),
    (
        "create_queue",
        201,
        "AddToQueue",
        "queue_add",
        "id",
        "$response.body#/id",
    ),
    (
        "create_graph",
        201,
        "GetGraph",
        "get_graph",
        "name",
        "$response.body#/name",
    ),
    (
        "create_graph",
        201,
        "RunGraph",
        "control",
        "name",
        "$response.body#/name",
    ),
    (
        "control",
        200,
        "GetRun",
        "get_run",
        "id",
        "$response.body#/current_run/id",
    ),
    (
        "create",
        201,
        "GetSession",
        "sessions_show",
        "id",
        "$response.body#/id",
    ),
    (
        "create",
        201,
        "SendToSession",
        "send",
        "id",
        "$response.body#/id",
    ),
];

/// Adds [`LINKS`] to the answers they start from.
fn add_links(paths: &mut openapi::Paths) {
    for (_, item) in paths.paths.iter_mut() {
        let ReferenceOr::Item(item) = item else {
            continue;
        };
        for op in operations(item) {
            let Some(id) = op.operation_id.clone() else {
                continue;
            };
            let Some(responses) = op.responses.as_mut() else {
                continue;
            };
            for (from, code, name, target, param, value) in LINKS {
                if *from != id {
                    continue;
                }
                if let Some(ReferenceOr::Item(answer)) =
                    responses.responses.get_mut(&Code::Code(*code))
                {
                    answer.links.insert(
                        (*name).to_string(),
                        ReferenceOr::Item(openapi::Link {
                            description: None,
                            operation: openapi::LinkOperation::OperationId((*target).to_string()),
                            request_body: None,
                            parameters: [((*param).to_string(), serde_json::Value::from(*value))]
                                .into_iter()
                                .collect(),
                            server: None,
                            extensions: Default::default(),
                        }),
                    );
                }
            }
        }
    }
}

/// The handler's own name of an id `canopy_daemon::api::engine::get_graph`.
fn short_name(id: &str) -> &str {
    id.rsplit("::").next().unwrap_or(id)
}

/// The module of an id `canopy_daemon::api::engine::get_graph` (`engine`).
fn module_name(id: &str) -> &str {
    id.rsplit("::").nth(1).unwrap_or("api")
}

/// A route's resource: `/api/graphs/{name}/control` is `graphs`.
fn tag_of(path: &str) -> String {
    path.trim_start_matches("/api/")
        .split('/')
        .next()
        .filter(|s| !s.is_empty() && !s.starts_with('{'))
        .unwrap_or("daemon")
        .to_string()
}

/// The `{name}` parameters of a route's template, in order.
fn template_params(path: &str) -> Vec<String> {
    path.split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| name.trim_start_matches('*').to_string())
        .collect()
}

/// Documents each template parameter an operation does not document yet, as a string.
fn add_path_params(op: &mut Operation, params: &[String]) {
    for name in params {
        let known = op.parameters.iter().any(|p| match p {
            ReferenceOr::Item(Parameter::Path { parameter_data, .. }) => {
                &parameter_data.name == name
            }
            _ => false,
        });
        if known {
            continue;
        }
        op.parameters.push(ReferenceOr::Item(Parameter::Path {
            parameter_data: ParameterData {
                name: name.clone(),
                description: Some(param_description(name).to_string()),
                required: true,
                format: ParameterSchemaOrContent::Schema(SchemaObject {
                    json_schema: schemars::json_schema!({ "type": "string" }),
                    example: None,
                    external_docs: None,
                }),
                extensions: Default::default(),
                deprecated: None,
                example: None,
                examples: Default::default(),
                explode: None,
            },
            style: openapi::PathStyle::Simple,
        }));
    }
}

fn param_description(name: &str) -> &'static str {
    match name {
        "id" => "An id, or a prefix of one that names one thing.",
        "name" => "A name, or an id or a unique prefix of one.",
        "spec" => "A spec: its id or a unique id prefix.",
        _ => "A name or an id.",
    }
}

/// An operation id from a handler's type: `canopy_daemon::api::engine::get_graph`.
fn id_of<H>() -> String {
    std::any::type_name::<H>().to_string()
}

macro_rules! method {
    ($name:ident, $with:ident) => {
        /// A documented route of this method, its operation id the handler's name.
        pub(super) fn $name<H, I, O, T>(handler: H) -> ApiMethodRouter<AppState>
        where
            H: Handler<T, AppState> + aide::operation::OperationHandler<I, O>,
            I: OperationInput,
            O: OperationOutput,
            T: 'static,
        {
            let id = id_of::<H>();
            aide::axum::routing::$with(handler, move |op| op.id(&id))
        }
    };
}

method!(get, get_with);
method!(post, post_with);
method!(put, put_with);
method!(patch, patch_with);
method!(delete, delete_with);

/// A JSON answer of `T`, described as its schema.
fn json_response<T: JsonSchema>(ctx: &mut GenContext, op: &mut Operation) -> Option<Response> {
    axum::Json::<T>::operation_response(ctx, op)
}

/// `response`, if there is one, as the answer with status `code`.
fn at(code: u16, response: Option<Response>) -> Vec<(Option<Code>, Response)> {
    response
        .map(|r| (Some(Code::Code(code)), r))
        .into_iter()
        .collect()
}

impl<T: JsonSchema> OperationInput for ApiJson<T> {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        axum::Json::<T>::operation_input(ctx, operation);
    }
}

impl<T: JsonSchema> OperationOutput for ApiJson<T> {
    type Inner = T;

    fn operation_response(ctx: &mut GenContext, operation: &mut Operation) -> Option<Response> {
        json_response::<T>(ctx, operation)
    }

    fn inferred_responses(
        ctx: &mut GenContext,
        operation: &mut Operation,
    ) -> Vec<(Option<Code>, Response)> {
        at(200, json_response::<T>(ctx, operation))
    }
}

impl<T: JsonSchema> OperationInput for super::error::OptionalJson<T> {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        axum::Json::<T>::operation_input(ctx, operation);
        if let Some(ReferenceOr::Item(body)) = operation.request_body.as_mut() {
            body.required = false;
        }
    }
}

impl<T: JsonSchema> OperationInput for ApiQuery<T> {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        axum::extract::Query::<T>::operation_input(ctx, operation);
    }
}

impl OperationOutput for ApiError {
    type Inner = ErrorBody;

    fn operation_response(ctx: &mut GenContext, operation: &mut Operation) -> Option<Response> {
        json_response::<ErrorBody>(ctx, operation)
    }

    /// Every route can fail: 400 (the message names the field), 401/403 (the guard), 404,
    /// 409, 412 (a stale version), 413, 415, 422 (a plugin call failed), 500, 503 (stopping).
    fn inferred_responses(
        ctx: &mut GenContext,
        operation: &mut Operation,
    ) -> Vec<(Option<Code>, Response)> {
        // Registers `ErrorBody` among the components; the answer itself is the one every
        // operation documents (see `finish`).
        let _ = json_response::<ErrorBody>(ctx, operation);
        vec![(None, error_response())]
    }
}

/// A JSON answer with a status other than 200, documented as such.
macro_rules! status_answer {
    ($(#[$doc:meta])* $name:ident, $code:literal) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name<T>(pub T);

        impl<T: Serialize> IntoResponse for $name<T> {
            fn into_response(self) -> HttpResponse {
                let status = StatusCode::from_u16($code).unwrap_or(StatusCode::OK);
                (status, axum::Json(self.0)).into_response()
            }
        }

        impl<T: JsonSchema> OperationOutput for $name<T> {
            type Inner = T;

            fn operation_response(
                ctx: &mut GenContext,
                operation: &mut Operation,
            ) -> Option<Response> {
                json_response::<T>(ctx, operation)
            }

            fn inferred_responses(
                ctx: &mut GenContext,
                operation: &mut Operation,
            ) -> Vec<(Option<Code>, Response)> {
                at($code, json_response::<T>(ctx, operation))
            }
        }
    };
}

status_answer!(
    /// 201 with the created resource.
    Created,
    201
);
status_answer!(
    /// 202 with what was accepted: work that goes on after the answer.
    Accepted,
    202
);

/// One of two answers (`L` or `R`), each documented with its own status.
#[derive(Debug)]
pub enum Either<L, R> {
    Left(L),
    Right(R),
}

impl<L: IntoResponse, R: IntoResponse> IntoResponse for Either<L, R> {
    fn into_response(self) -> HttpResponse {
        match self {
            Either::Left(answer) => answer.into_response(),
            Either::Right(answer) => answer.into_response(),
        }
    }
}

impl<L: OperationOutput, R: OperationOutput> OperationOutput for Either<L, R> {
    type Inner = L::Inner;

    fn operation_response(ctx: &mut GenContext, operation: &mut Operation) -> Option<Response> {
        L::operation_response(ctx, operation)
    }

    fn inferred_responses(
        ctx: &mut GenContext,
        operation: &mut Operation,
    ) -> Vec<(Option<Code>, Response)> {
        let mut responses = L::inferred_responses(ctx, operation);
        responses.extend(R::inferred_responses(ctx, operation));
        responses
    }
}

/// A JSON answer with the resource's version as its `ETag` (`"7"`), for `If-Match`.
#[derive(Debug)]
pub struct Tagged<T> {
    pub version: i64,
    pub body: T,
}

impl<T: Serialize> IntoResponse for Tagged<T> {
    fn into_response(self) -> HttpResponse {
        let tag = axum::http::HeaderValue::from_str(&format!("\"{}\"", self.version))
            .unwrap_or(axum::http::HeaderValue::from_static("\"0\""));
        ([(axum::http::header::ETAG, tag)], axum::Json(self.body)).into_response()
    }
}

impl<T: JsonSchema> OperationOutput for Tagged<T> {
    type Inner = T;

    fn operation_response(ctx: &mut GenContext, operation: &mut Operation) -> Option<Response> {
        let mut response = json_response::<T>(ctx, operation)?;
        response.headers.insert(
            "ETag".into(),
            ReferenceOr::Item(openapi::Header {
                description: Some(
                    "The graph's version, quoted (`\"7\"`): send it back as `If-Match`.".into(),
                ),
                style: Default::default(),
                required: true,
                deprecated: None,
                format: ParameterSchemaOrContent::Schema(SchemaObject {
                    json_schema: schemars::json_schema!({ "type": "string" }),
                    example: None,
                    external_docs: None,
                }),
                example: None,
                examples: Default::default(),
                extensions: Default::default(),
            }),
        );
        Some(response)
    }

    fn inferred_responses(
        ctx: &mut GenContext,
        operation: &mut Operation,
    ) -> Vec<(Option<Code>, Response)> {
        at(200, Self::operation_response(ctx, operation))
    }
}

/// An answer that is JSON `T`, or with `follow` a stream of server-sent events whose `data`
/// is each a JSON `E` (the feed, a session's inbox).
pub struct JsonOrEvents<T, E>(pub HttpResponse, std::marker::PhantomData<(T, E)>);

impl<T, E> JsonOrEvents<T, E> {
    pub fn new(response: impl IntoResponse) -> Self {
        Self(response.into_response(), std::marker::PhantomData)
    }
}

impl<T, E> IntoResponse for JsonOrEvents<T, E> {
    fn into_response(self) -> HttpResponse {
        self.0
    }
}

impl<T: JsonSchema, E: JsonSchema> OperationOutput for JsonOrEvents<T, E> {
    type Inner = T;

    fn operation_response(ctx: &mut GenContext, operation: &mut Operation) -> Option<Response> {
        let mut response = json_response::<T>(ctx, operation)?;
        let data = ctx.schema.subschema_for::<E>();
        // Each event as a client reads it: its name, id, and `data` that is JSON of `E`.
        let event = schemars::json_schema!({
            "type": "object",
            "required": ["data"],
            "properties": {
                "event": { "type": "string" },
                "id": { "type": "string" },
                "retry": { "type": "integer" },
                "data": {
                    "type": "string",
                    "contentMediaType": "application/json",
                    "contentSchema": data,
                },
            },
        });
        response.content.insert(
            "text/event-stream".into(),
            MediaType {
                schema: Some(SchemaObject {
                    json_schema: event,
                    example: None,
                    external_docs: None,
                }),
                ..Default::default()
            },
        );
        response.description =
            "JSON; with `follow=true`, server-sent events whose `data` is JSON.".into();
        Some(response)
    }

    fn inferred_responses(
        ctx: &mut GenContext,
        operation: &mut Operation,
    ) -> Vec<(Option<Code>, Response)> {
        at(200, Self::operation_response(ctx, operation))
    }
}

/// The schema of either of two types (`anyOf`): an event stream's two kinds of `data`.
pub struct OneOf<A, B>(std::marker::PhantomData<(A, B)>);

impl<A: JsonSchema, B: JsonSchema> JsonSchema for OneOf<A, B> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        format!("OneOf_{}_{}", A::schema_name(), B::schema_name()).into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let (a, b) = (
            generator.subschema_for::<A>(),
            generator.subschema_for::<B>(),
        );
        schemars::json_schema!({ "anyOf": [a, b] })
    }
}

#[cfg(test)]
mod tests {
    use super::{tag_of, template_params};

    #[test]
    fn tuples_and_true_schemas_are_written_as_openapi_3_1_reads_them() {
        let mut schema = serde_json::json!({
            "properties": {
                "any": true,
                "pair": { "type": "array", "items": [{ "type": "string" }, { "type": "string" }] },
                "mixed": { "type": "array", "items": [{ "type": "string" }, { "type": "integer" }] },
                "list": { "type": "array", "items": true },
            },
            "additionalProperties": true,
        });
        super::normalize(&mut schema);
        assert_eq!(
            schema,
            serde_json::json!({
                "properties": {
                    "any": {},
                    "pair": { "type": "array", "items": { "type": "string" }, "minItems": 2, "maxItems": 2 },
                    "mixed": { "type": "array", "prefixItems": [{ "type": "string" }, { "type": "integer" }], "maxItems": 2 },
                    "list": { "type": "array", "items": {} },
                },
                "additionalProperties": true,
            })
        );
    }

    #[test]
    fn a_routes_template_names_its_parameters_and_its_resource() {
        assert_eq!(
            template_params("/api/queues/{id}/specs/{spec}/group"),
            ["id", "spec"]
        );
        assert!(template_params("/api/graphs").is_empty());
        assert_eq!(tag_of("/api/graphs/{name}/control"), "graphs");
        assert_eq!(tag_of("/api/health"), "health");
    }
}
