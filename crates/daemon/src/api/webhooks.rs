//! `/api/webhooks`: the configured webhooks (secrets redacted), their deliveries, a
//! redelivery, and a local test of a hook without HTTP to its listener.
//!
//! - `GET  /api/webhooks` -- `{listen, node, hooks: [...]}`; `?project=P` narrows to a project.
//! - `GET  /api/webhooks/hooks/{scope}/{id}` -- one hook, with its delivery counts.
//! - `POST /api/webhooks/hooks/{scope}/{id}/test` -- `{body, headers, query}`: recorded as a
//!   test delivery, checked against the hook's rules and run now; its outcome.
//! - `GET  /api/webhooks/deliveries?scope=&hook=&status=&last=` -- newest first.
//! - `GET  /api/webhooks/deliveries/{id}` -- one delivery (id or unique prefix), with its body.
//! - `POST /api/webhooks/deliveries/{id}/redeliver` -- `{wait}`: a new delivery of the same
//!   request.

use canopy_model::requests::webhooks::{
    DeliveriesQuery, RedeliverBody, WebhookListQuery, WebhookTestBody,
};
use std::time::Duration;

use super::docs::{Accepted, Either, get, post};
use aide::axum::ApiRouter;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use canopy_model::records::answers::DeliveryList;
use canopy_model::records::webhooks::Delivery;

use super::{ApiError, ApiJson, ApiQuery, AppState};
use canopy_core::webhooks::intake::{Intake, intake};
use canopy_core::webhooks::{IngressError, Outcome, Received, RedeliverError, Taken, hook_view};
use canopy_model::records::webhooks::DeliveryDetail;
use canopy_model::records::webhooks::{DeliveryStatus, WebhookList, WebhookView};
use canopy_store::StoreError;
use canopy_store::webhooks::DeliveryFilter;

pub fn router() -> ApiRouter<AppState> {
    ApiRouter::new()
        .api_route("/", get(list))
        .api_route("/hooks/{scope}/{id}", get(show))
        .api_route("/hooks/{scope}/{id}/test", post(test))
        .api_route("/deliveries", get(deliveries))
        .api_route("/deliveries/{id}", get(delivery))
        .api_route("/deliveries/{id}/redeliver", post(redeliver))
}

impl From<IngressError> for ApiError {
    fn from(err: IngressError) -> Self {
        match err {
            IngressError::UnknownHook(_) => Self::not_found(err.to_string()),
            IngressError::NotServed(_) => Self::conflict(err.to_string()),
            IngressError::Store(err) => err.into(),
        }
    }
}

impl From<RedeliverError> for ApiError {
    fn from(err: RedeliverError) -> Self {
        match err {
            RedeliverError::Gone(_) => Self::conflict(err.to_string()),
            RedeliverError::Ingress(err) => err.into(),
            RedeliverError::Store(err) => err.into(),
        }
    }
}

async fn list(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<WebhookListQuery>,
) -> Result<ApiJson<WebhookList>, ApiError> {
    let ingress = &state.webhooks;
    // One snapshot for the whole answer: a reload may swap the hooks meanwhile.
    let webhooks = ingress.webhooks();
    let hooks: Vec<WebhookView> = webhooks
        .hooks
        .values()
        .filter(|h| query.project.as_ref().is_none_or(|p| &h.scope == p))
        .map(|h| hook_view(h, ingress.listen(), ingress.problem(h)))
        .collect();
    // A project with no webhook (a typo, say) is said, not answered with an empty list.
    if let Some(project) = &query.project
        && hooks.is_empty()
    {
        let mut projects: Vec<&str> = webhooks
            .hooks
            .values()
            .map(|h| h.scope.as_str())
            .filter(|scope| *scope != "global")
            .collect();
        projects.dedup();
        return Err(ApiError::bad_request(format!(
            "query parameter `project`: project `{project}` has no webhooks; {}",
            if projects.is_empty() {
                "no project has any (`[projects.NAME.webhooks]` in canopy.toml)".to_string()
            } else {
                format!("projects with webhooks: {}", projects.join(", "))
            }
        )));
    }
    Ok(ApiJson(WebhookList {
        listen: ingress.listen().map(str::to_string),
        node: ingress.node().to_string(),
        max_connections: u64::try_from(webhooks.max_connections).unwrap_or(u64::MAX),
        header_timeout_secs: webhooks.header_timeout.as_secs(),
        flood_rate: webhooks.flood_rate,
        flood: ingress.flood_on(),
        hooks,
    }))
}

fn find(
    state: &AppState,
    scope: &str,
    id: &str,
) -> Result<std::sync::Arc<canopy_core::webhooks::Hook>, ApiError> {
    state.webhooks.hook(scope, id).ok_or_else(|| {
        let known: Vec<String> = state
            .webhooks
            .webhooks()
            .hooks
            .values()
            .map(|h| h.key())
            .collect();
        ApiError::not_found(format!(
            "no webhook `{scope}/{id}` is configured; configured: {}",
            if known.is_empty() {
                "(none)".to_string()
            } else {
                known.join(", ")
            }
        ))
    })
}

async fn show(
    State(state): State<AppState>,
    Path((scope, id)): Path<(String, String)>,
) -> Result<ApiJson<WebhookView>, ApiError> {
    let hook = find(&state, &scope, &id)?;
    let mut view = hook_view(
        &hook,
        state.webhooks.listen(),
        state.webhooks.problem(&hook),
    );
    let counts = state
        .store
        .read(move |rd| rd.count_deliveries(Some(&scope), Some(&id)))
        .await?;
    view.deliveries = Some(
        counts
            .into_iter()
            .map(|(status, n)| (status.to_string(), u64::try_from(n).unwrap_or(0)))
            .collect(),
    );
    Ok(ApiJson(view))
}

/// Runs a hook locally: the same rules, recording and handler as a request to the listener,
/// without its auth (the caller holds the daemon's token) and without its queue.
async fn test(
    State(state): State<AppState>,
    Path((scope, id)): Path<(String, String)>,
    ApiJson(input): ApiJson<WebhookTestBody>,
) -> Result<ApiJson<Outcome>, ApiError> {
    let hook = find(&state, &scope, &id)?;
    let mut headers = HeaderMap::new();
    for (i, (name, value)) in input.headers.iter().enumerate() {
        let lower = name.to_ascii_lowercase();
        if canopy_core::webhooks::config::AUTH_HEADERS.contains(&lower.as_str()) {
            return Err(ApiError::bad_request(format!(
                "field `headers[{i}]`: `{name}` carries credentials; a test takes none"
            )));
        }
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(lower.as_bytes()),
            HeaderValue::from_str(value),
        ) else {
            return Err(ApiError::bad_request(format!(
                "field `headers[{i}]`: not a header name and value"
            )));
        };
        headers.append(name, value);
    }
    if input.body.len() > hook.max_body {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!(
                "field `body`: {} bytes, more than the hook's max_body_bytes ({})",
                input.body.len(),
                hook.max_body
            ),
        ));
    }
    let Intake { received, ignored } = intake(
        &hook,
        "POST",
        hook.url_path(),
        input.query.as_deref(),
        &headers,
        input.body.into_bytes(),
    )
    .map_err(|refused| ApiError::bad_request(format!("field `headers`: {refused}")))?;
    // A test runs whatever delivery id its headers carry.
    let received = Received {
        sender_delivery_id: None,
        ..received
    };
    let delivery_id = match state
        .webhooks
        .record(&hook, received, ignored.clone(), None, true)
        .await?
    {
        Taken::New(id)
        | Taken::Duplicate(Outcome {
            delivery_id: id, ..
        }) => id,
    };
    if let Some(reason) = ignored {
        return Ok(ApiJson(Outcome {
            delivery_id,
            status: DeliveryStatus::Ignored,
            reason: Some(reason),
            error: None,
            output: None,
            result: None,
            duration_ms: None,
            duplicate: false,
        }));
    }
    Ok(ApiJson(state.webhooks.run_now(&hook, &delivery_id).await?))
}

async fn deliveries(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<DeliveriesQuery>,
) -> Result<ApiJson<DeliveryList>, ApiError> {
    let status = query
        .status
        .as_deref()
        .map(|s| {
            s.parse::<DeliveryStatus>()
                .map_err(|err| ApiError::bad_request(format!("query parameter `status`: {err}")))
        })
        .transpose()?;
    let (scope, hook) = match query.hook.as_deref() {
        Some(key) => match key.split_once('/') {
            Some((scope, id)) => (Some(scope.to_string()), Some(id.to_string())),
            None => (query.scope.clone(), Some(key.to_string())),
        },
        None => (query.scope.clone(), None),
    };
    let last = query.last.unwrap_or(20);
    // Waited deliveries running now are recorded only when they end: shown from memory.
    let flying: Vec<_> = state
        .webhooks
        .deliveries_in_flight()
        .into_iter()
        .filter(|d| scope.as_ref().is_none_or(|s| &d.scope == s))
        .filter(|d| hook.as_ref().is_none_or(|h| &d.hook == h))
        .filter(|d| status.is_none_or(|s| d.status == s))
        .collect();
    let filter = DeliveryFilter {
        scope,
        hook,
        status,
        last,
    };
    let recorded = state
        .store
        .read(move |rd| rd.list_deliveries(&filter))
        .await?;
    let mut list = flying;
    list.extend(recorded);
    // Ids are ordered by time: newest first, as the store lists them.
    list.sort_by(|a, b| b.id.cmp(&a.id));
    list.truncate(last.clamp(1, 10_000));
    Ok(ApiJson(DeliveryList { deliveries: list }))
}

async fn delivery(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<ApiJson<DeliveryDetail>, ApiError> {
    let (delivery, body) = match state.webhooks.delivery_in_flight(&id) {
        Some(flying) => flying,
        None => {
            state
                .store
                .read(move |rd| {
                    let id = rd.resolve_delivery(&id)?;
                    rd.delivery_with_body(&id)
                })
                .await?
        }
    };
    Ok(ApiJson(DeliveryDetail {
        delivery,
        body: String::from_utf8_lossy(&body).into_owned(),
    }))
}

async fn redeliver(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<RedeliverBody>,
) -> Result<Either<ApiJson<Outcome>, Accepted<Delivery>>, ApiError> {
    let wait = body.wait;
    let ingress = &state.webhooks;
    let (hook, new, watch) = ingress.redeliver(&id, wait).await?;
    if let Some(watch) = watch {
        let outcome = ingress
            .wait(&new, watch, hook.timeout + Duration::from_secs(30))
            .await?;
        return Ok(Either::Left(ApiJson(outcome)));
    }
    let delivery = state
        .store
        .read(move |rd| rd.delivery(&new))
        .await
        .map_err(|err: StoreError| ApiError::from(err))?;
    Ok(Either::Right(Accepted(delivery)))
}
