//! Running one delivery's handler: marked `running` (committed) before anything runs, then the
//! handler, then its end recorded with `webhook.handled` / `webhook.failed` in one write, which
//! also marks the hook's next delivery running when one waits. A waited delivery (answered by
//! its outcome, see [`super::Ingress::run_waited`]) is written once, whole, when it ends.

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

use super::config::{Handler, Hook};
use super::rules::{FieldPath, Request};
use super::{Ingress, MAX_ARG_VALUE, MAX_BODY_MARKER, Outcome};
use crate::engine::NewSpec;
use crate::hooks::runs::OUTPUT_LIMIT;
use crate::runner::{self, Job, Kind, Place};
use canopy_executors::plugins::{Ending, WorkConfig, Workdir};
use canopy_model::events::webhook::{
    Delivery as DeliveryRef, HandlerEnded, WebhookFailed, WebhookHandled,
};
use canopy_model::events::{Actor, Cause, Event};
use canopy_model::markers::MarkerValues;
use canopy_model::records::webhooks::{Delivery, DeliveryStatus};
use canopy_model::spec_format;
use canopy_model::work::Provenance;
use canopy_store::StoreError;
use canopy_store::webhooks::{DeliveryEnd, NewDelivery};

/// The markers a webhook handler's config may use (`{{body}}` in an agent's prompt, say); a
/// command also gets each as `$CANOPY_HOOK_<MARKER>`.
pub const WEBHOOK_MARKERS: &[&str] = &[
    "delivery_id",
    "webhook",
    "method",
    "path",
    "content_type",
    "query",
    "body",
];

/// Why a delivery did not start.
pub(super) enum NotStarted {
    /// A planned stop refused it: it stays accepted and runs after the restart.
    Refused,
    /// It was not accepted any more (another worker or a restart took it); nothing ran.
    Taken,
}

/// A delivery running, admitted past a planned stop until it ends: recorded running
/// (committed), or, for a waited one, not recorded until its end (`unrecorded`).
pub(super) struct Running {
    delivery: Delivery,
    body: Vec<u8>,
    _admitted: crate::drain::Admitted,
    /// A waited delivery, written whole (with its `webhook.received`) in the write of its end.
    unrecorded: Option<NewDelivery>,
}

impl Running {
    /// A delivery about to run (see [`super::Ingress::run_waited`]).
    pub(super) fn recorded(new: &NewDelivery, admitted: crate::drain::Admitted) -> Self {
        Self {
            delivery: new.recorded(),
            body: new.body.clone(),
            _admitted: admitted,
            unrecorded: None,
        }
    }

    /// This delivery is written only when it ends, whole, as `new`.
    pub(super) fn whole(self, new: NewDelivery) -> Self {
        Self {
            unrecorded: Some(new),
            ..self
        }
    }
}

/// Marks an accepted delivery running, in a write of its own.
pub(super) async fn start(ingress: &Ingress, id: &str) -> Result<Running, NotStarted> {
    let Some(admitted) = ingress.inner.drain.admit() else {
        return Err(NotStarted::Refused);
    };
    let started = {
        let id = id.to_string();
        ingress.inner.store.write(move |tx| start_in(tx, &id)).await
    };
    match started {
        Ok(Some((delivery, body))) => Ok(Running {
            delivery,
            body,
            _admitted: admitted,
            unrecorded: None,
        }),
        Ok(None) => Err(NotStarted::Taken),
        Err(err) => {
            tracing::error!(delivery = %id, error = %err, "cannot mark a webhook delivery running; it stays accepted");
            Err(NotStarted::Taken)
        }
    }
}

/// Inside a write: marks `id` running and reads it back, or `None` when it was not accepted.
fn start_in(
    tx: &canopy_store::Tx<'_>,
    id: &str,
) -> Result<Option<(Delivery, Vec<u8>)>, StoreError> {
    if !tx.start_delivery(id)? {
        return Ok(None);
    }
    tx.delivery_with_body(id).map(Some)
}

/// Runs a started delivery's handler and records its end with `webhook.handled` /
/// `webhook.failed`; its outcome. Once the handler has ended, `then` may name the hook's next
/// delivery (with its admission past a planned stop): it is marked running in the same write,
/// so a busy hook's queue costs one commit per delivery, not two; it is returned started when
/// it was still accepted.
pub(super) async fn run(
    ingress: &Ingress,
    hook: &Arc<Hook>,
    running: Running,
    then: impl FnOnce() -> Option<(String, crate::drain::Admitted)>,
) -> (Outcome, Option<Running>) {
    let Running {
        delivery,
        body,
        _admitted: admitted,
        unrecorded,
    } = running;
    let id = delivery.id.clone();
    let clock = Instant::now();
    // The sync hooks on `webhook.pre_handle` decide whether the handler runs, and may patch
    // the body it gets.
    let (body, denied) = match ask_pre_handle(ingress, hook, &delivery, body).await {
        Ok(body) => (body, None),
        Err(why) => (Vec::new(), Some(why)),
    };
    let ended = match &hook.handler {
        _ if denied.is_some() => Ended {
            status: DeliveryStatus::Denied,
            error: denied,
            output: None,
            result: None,
        },
        Handler::Spec {
            title_from,
            body_from,
            queue,
            workdir,
        } => {
            let spec = SpecHandler {
                title_from: title_from.as_ref(),
                body_from: body_from.as_ref(),
                queue: queue.as_deref(),
                workdir: workdir.as_ref(),
            };
            cause(hook)
                .scope(spec.run(ingress, hook, &delivery, &body))
                .await
        }
        Handler::Work { work, stdin } => {
            run_work(ingress, hook, &delivery, body, work, *stdin).await
        }
    };
    let duration_ms = i64::try_from(clock.elapsed().as_millis()).unwrap_or(i64::MAX);
    let end = DeliveryEnd {
        status: ended.status,
        error: ended.error,
        output: ended.output,
        result: ended.result,
        duration_ms,
    };
    match end.status {
        DeliveryStatus::Completed => {}
        _ => tracing::warn!(
            webhook = %hook.key(),
            delivery = %id,
            status = %end.status,
            error = end.error.as_deref().unwrap_or(""),
            "webhook handler did not complete"
        ),
    }
    let outcome = Outcome {
        delivery_id: id.to_string(),
        status: end.status,
        reason: None,
        error: end.error.clone(),
        output: end.output.clone(),
        result: end.result.clone(),
        duration_ms: Some(duration_ms),
        duplicate: false,
    };
    let event = ended_event(
        super::delivery_ref(&id, hook),
        end.status,
        end.error.clone(),
        Some(duration_ms),
    );
    let next = then();
    let next_id = next.as_ref().map(|(id, _)| id.clone());
    let mut written = end_write(
        ingress,
        &id,
        &end,
        &event,
        hook,
        next_id,
        unrecorded.as_ref(),
    )
    .await;
    if let (Err(err), Some((next, _))) = (&written, &next) {
        // The next delivery's part must not cost this one its record: it is written alone.
        tracing::error!(delivery = %next, error = %err, "cannot mark the next webhook delivery running with the end of the last; it stays accepted");
        written = end_write(ingress, &id, &end, &event, hook, None, unrecorded.as_ref()).await;
    }
    // This delivery's admission ends with its record.
    drop(admitted);
    let started = match written {
        Ok((recorded, started)) => {
            match recorded {
                Some(recorded) => ingress.inner.bus.publish(recorded).await,
                None => {
                    tracing::warn!(delivery = %id, "a webhook delivery's end was not recorded: it was no longer running");
                }
            }
            started
        }
        Err(err) => {
            tracing::error!(delivery = %id, error = %err, "cannot record a webhook delivery's end");
            None
        }
    };
    ingress.notify(&outcome);
    let next = next
        .zip(started)
        .map(|((_, admitted), (delivery, body))| Running {
            delivery,
            body,
            _admitted: admitted,
            unrecorded: None,
        });
    (outcome, next)
}

/// Longest body a `webhook.pre_handle` question carries, in bytes (see [`ask_pre_handle`]).
const QUESTION_BODY: usize = 16 * 1024;

/// Asks the sync hooks on `webhook.pre_handle` about a delivery ([`crate::hooks::decide`]):
/// the body its handler gets (patched, or as sent), or why it is denied.
async fn ask_pre_handle(
    ingress: &Ingress,
    hook: &Hook,
    delivery: &Delivery,
    body: Vec<u8>,
) -> Result<Vec<u8>, String> {
    const PRE_HANDLE: &str = "webhook.pre_handle";
    let bus = &ingress.inner.bus;
    if !bus.asks(PRE_HANDLE) {
        return Ok(body);
    }
    let text = String::from_utf8_lossy(&body);
    // Bounded so that the whole question as JSON (`CANOPY_HOOK_DATA`, where a control
    // character takes six bytes) stays under Linux's 128 KiB for one environment string: a
    // sender must not be able to make the hook fail to start, and so be skipped.
    let (shown, _) = bounded(&text, QUESTION_BODY);
    let question = canopy_model::events::webhook::WebhookPreHandle {
        delivery: super::delivery_ref(&delivery.id, hook),
        method: delivery.method.clone(),
        path: delivery.path.clone(),
        content_type: delivery.content_type.clone(),
        query: delivery.query.clone(),
        body: shown.to_string(),
    };
    let decision = match bus
        .decide(crate::hooks::decide::Question::of(&question, cause(hook)))
        .await
    {
        Ok(decision) => decision,
        Err(err) => {
            return Err(format!(
                "its sync hooks' answer could not be recorded, so it is not handled: {err}"
            ));
        }
    };
    match decision.verdict {
        crate::hooks::decide::Verdict::Deny { hook, reason } => {
            Err(format!("sync hook `{hook}` denied the delivery: {reason}"))
        }
        crate::hooks::decide::Verdict::Allow => Ok(decision
            .patched_text("body")
            .map_or(body, |patched| patched.as_bytes().to_vec())),
    }
}

/// The write that records a delivery's end with its event and, when `next` names one, marks
/// the hook's next delivery running; the recorded event (none when the delivery was no longer
/// running) and the next one started (none when it was no longer accepted). A delivery not
/// recorded yet (`unrecorded`, a waited one) is inserted first, with its `webhook.received`.
async fn end_write(
    ingress: &Ingress,
    id: &str,
    end: &DeliveryEnd,
    event: &Event,
    hook: &Hook,
    next: Option<String>,
    unrecorded: Option<&NewDelivery>,
) -> Result<(Option<crate::bus::Recorded>, Option<(Delivery, Vec<u8>)>), StoreError> {
    let (bus, id, end, event, cause) = (
        ingress.inner.bus.clone(),
        id.to_string(),
        end.clone(),
        event.clone(),
        cause(hook),
    );
    let unrecorded = unrecorded.map(|new| {
        (
            new.clone(),
            super::received_event(hook, new),
            super::receiver_cause(hook),
        )
    });
    ingress
        .inner
        .store
        .write(move |tx| {
            let mut recorded = None;
            if let Some((new, received, receiver)) = &unrecorded {
                tx.insert_delivery(new)?;
                recorded = Some(bus.record(tx, [received.clone()], receiver)?);
            }
            if tx.finish_delivery(&id, &end)? {
                let ended = bus.record(tx, [event], &cause)?;
                recorded = Some(match recorded {
                    Some(mut received) => {
                        received.extend(ended);
                        received
                    }
                    None => ended,
                });
            }
            let started = match &next {
                Some(next) => start_in(tx, next)?,
                None => None,
            };
            Ok((recorded, started))
        })
        .await
}

/// The `webhook.handled` / `webhook.failed` event of a delivery that ended.
pub(super) fn ended_event(
    delivery: DeliveryRef,
    status: DeliveryStatus,
    error: Option<String>,
    duration_ms: Option<i64>,
) -> Event {
    let ended = HandlerEnded {
        delivery,
        status,
        error,
        duration_ms,
    };
    if status == DeliveryStatus::Completed {
        Event::new(&WebhookHandled(ended))
    } else {
        Event::new(&WebhookFailed(ended))
    }
}

/// Who a handler acts as, one dispatch level below the request.
fn cause(hook: &Hook) -> Cause {
    Cause {
        actor: Actor::Webhook(hook.key()),
        depth: 1,
    }
}

/// Runs an accepted delivery's handler, holding the drain's admission throughout.
/// How a handler ended.
struct Ended {
    status: DeliveryStatus,
    error: Option<String>,
    output: Option<String>,
    result: Option<Value>,
}

impl Ended {
    fn failed(error: String) -> Self {
        Self {
            status: DeliveryStatus::Failed,
            error: Some(error),
            output: None,
            result: None,
        }
    }
}

/// The recorded request as the field paths read it.
struct Parsed {
    json: Option<Value>,
    headers: HeaderMap,
    query: Vec<(String, String)>,
}

impl Parsed {
    fn of(delivery: &Delivery, body: &[u8]) -> Self {
        let mut headers = HeaderMap::new();
        for (name, value) in &delivery.headers {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                headers.append(name, value);
            }
        }
        Self {
            json: serde_json::from_slice(body).ok(),
            headers,
            query: delivery
                .query
                .as_deref()
                .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
                .unwrap_or_default(),
        }
    }

    fn get(&self, path: &FieldPath) -> Option<String> {
        path.get(&Request {
            json: self.json.as_ref(),
            headers: &self.headers,
            query: &self.query,
        })
    }
}

/// The `spec` handler: the body (or a field of it) becomes a backlog spec.
struct SpecHandler<'a> {
    title_from: Option<&'a FieldPath>,
    body_from: Option<&'a FieldPath>,
    queue: Option<&'a str>,
    workdir: Option<&'a PathBuf>,
}

impl SpecHandler<'_> {
    async fn run(&self, ingress: &Ingress, hook: &Hook, delivery: &Delivery, body: &[u8]) -> Ended {
        let parsed = Parsed::of(delivery, body);
        let default_name = || {
            format!(
                "webhook {} delivery {}",
                hook.key(),
                canopy_store::ids::short(&delivery.id)
            )
        };
        let name = match self.title_from {
            Some(path) => match parsed.get(path) {
                Some(title) => title_line(&title),
                None => {
                    return Ended::failed(format!(
                        "title_from: the body has no `{path}` (it needs a JSON body with that field)"
                    ));
                }
            },
            None => default_name(),
        };
        let name = if name.is_empty() {
            default_name()
        } else {
            name
        };
        let text = match self.body_from {
            Some(path) => match parsed.get(path) {
                Some(text) => text,
                None => {
                    return Ended::failed(format!(
                        "body_from: the body has no `{path}` (it needs a JSON body with that field)"
                    ));
                }
            },
            None => String::from_utf8_lossy(body).into_owned(),
        };
        // A spec's text holds no NUL: one of a binary body reads as U+FFFD, as its bytes that
        // are not UTF-8 do.
        let spec_body = spec_body(&text.replace('\0', "\u{FFFD}"), hook, &delivery.id);
        let created = ingress
            .inner
            .backlog
            .add(NewSpec {
                name,
                body: spec_body,
                workdir: self.workdir.map(|w| w.to_string_lossy().into_owned()),
            })
            .await;
        let spec = match created {
            Ok(spec) => spec,
            Err(err) => return Ended::failed(format!("cannot add the spec: {err}")),
        };
        let mut result = json!({ "spec_id": spec.id, "spec_name": spec.name });
        if let Some(queue) = self.queue {
            match ingress.inner.backlog.enqueue(queue, &spec.id).await {
                Ok(queue_id) => result["queue_id"] = json!(queue_id),
                Err(err) => {
                    return Ended {
                        result: Some(result),
                        ..Ended::failed(format!(
                            "the spec {} was added, but not to queue `{queue}`: {err}",
                            spec.id
                        ))
                    };
                }
            }
        }
        Ended {
            status: DeliveryStatus::Completed,
            error: None,
            output: Some(format!("spec {} added", spec.id)),
            result: Some(result),
        }
    }
}

/// A spec's name from a field: its first line, tabs as spaces and without other control
/// characters (a name may hold none), at most 200 characters.
fn title_line(text: &str) -> String {
    let line: String = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default()
        .chars()
        .map(|c| if c == '\t' { ' ' } else { c })
        .filter(|c| !c.is_control())
        .take(200)
        .collect();
    line.trim().to_string()
}

/// The body of a spec made from `text`: as it is when it is already a tagged spec, else the
/// text as the objective, the other sections saying where it came from.
fn spec_body(text: &str, hook: &Hook, delivery_id: &str) -> String {
    if spec_format::parse(text).is_ok() {
        return text.to_string();
    }
    let wrap = |objective: &str| {
        let mut body = format!("<spec>\n<objective>\n{}\n</objective>\n", objective.trim());
        for tag in &spec_format::SECTIONS[1..] {
            body.push_str(&format!(
                "<{tag}>\n- (not given: filed by webhook {} from delivery {delivery_id})\n</{tag}>\n",
                hook.key()
            ));
        }
        body + "</spec>\n"
    };
    let body = wrap(text);
    if spec_format::parse(&body).is_ok() {
        return body;
    }
    // Text with tags of its own would not parse: its angle brackets are escaped.
    wrap(&text.replace('<', "&lt;").replace('>', "&gt;"))
}

/// Cuts `text` to what an environment string (and a marker rendered into a command line) can
/// hold: nothing from its first NUL byte on, which no process's environment or arguments can
/// carry (a binary body, or `\u0000` in a JSON field, made the spawn fail), and at most `limit`
/// bytes, on a character boundary. True when something was cut.
fn bounded(text: &str, limit: usize) -> (&str, bool) {
    let (text, cut) = match text.find('\0') {
        Some(nul) => (&text[..nul], true),
        None => (text, false),
    };
    if text.len() <= limit {
        return (text, cut);
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

/// `X-GitHub-Event` -> `X_GITHUB_EVENT`.
fn env_suffix(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// An executor handler: `command` (body on stdin), an action, `agent`, or another mode.
async fn run_work(
    ingress: &Ingress,
    hook: &Hook,
    delivery: &Delivery,
    body: Vec<u8>,
    work: &WorkConfig,
    stdin: bool,
) -> Ended {
    let parsed = Parsed::of(delivery, &body);
    let text = String::from_utf8_lossy(&body);
    let (shown, truncated) = bounded(&text, MAX_BODY_MARKER);
    let mut markers = MarkerValues::new();
    markers.insert("delivery_id".into(), delivery.id.clone());
    markers.insert("webhook".into(), hook.key());
    markers.insert("method".into(), delivery.method.clone());
    markers.insert("path".into(), delivery.path.clone());
    markers.insert(
        "content_type".into(),
        delivery.content_type.clone().unwrap_or_default(),
    );
    markers.insert("query".into(), delivery.query.clone().unwrap_or_default());
    markers.insert("body".into(), shown.to_string());
    let mut env = vec![
        ("CANOPY_HOOK_SCOPE".to_string(), hook.scope.clone()),
        ("CANOPY_HOOK_ID".to_string(), hook.id.clone()),
        ("CANOPY_HOOK_BODY_SIZE".to_string(), body.len().to_string()),
    ];
    if truncated {
        env.push(("CANOPY_HOOK_BODY_TRUNCATED".to_string(), "1".to_string()));
    }
    for (name, value) in &delivery.headers {
        env.push((
            format!("CANOPY_HOOK_HEADER_{}", env_suffix(name)),
            value.clone(),
        ));
    }
    for (name, path) in &hook.pass_env {
        if let Some(value) = parsed.get(path) {
            let (value, _) = bounded(&value, MAX_ARG_VALUE);
            env.push((format!("CANOPY_HOOK_ARG_{name}"), value.to_string()));
        }
    }
    let body_file = if stdin {
        // Its processes may outlive the run (`detach = true`): then a file of its own.
        let own = work.host().detach().unwrap_or(true);
        match ingress.inner.bodies.write(&delivery.id, &body, own).await {
            Ok(file) => {
                env.push((
                    "CANOPY_HOOK_BODY_FILE".to_string(),
                    file.path().to_string_lossy().into_owned(),
                ));
                Some(file)
            }
            Err(err) => {
                return Ended::failed(format!(
                    "cannot write the body for the command's stdin: {err}"
                ));
            }
        }
    } else {
        None
    };
    // A `cwd` that is not there fails the run naming it: run elsewhere, the handler would act
    // on a folder it was never meant for.
    // Resolved here, once: the runner takes it as it is.
    let workdir: Place = match &hook.workdir {
        Some(cwd) => match Workdir::resolve(cwd) {
            Ok(resolved) => resolved.into(),
            Err(_) => {
                return Ended::failed(format!(
                    "the hook's cwd `{}` is not an existing directory; nothing ran",
                    cwd.display()
                ));
            }
        },
        None => ingress.data_dir().to_path_buf().into(),
    };
    let job = Job {
        markers,
        supported_markers: Cow::Borrowed(WEBHOOK_MARKERS),
        env,
        // The `command` handler reads the body on stdin.
        stdin: body_file.as_ref().map(|f| f.path().to_path_buf()),
        ..Job::new(
            Kind::Webhook,
            Ok(work.clone()),
            workdir,
            Provenance {
                graph_id: String::new(),
                graph_name: String::new(),
                run_id: delivery.id.clone(),
                event: "webhook.received".to_string(),
                hook_index: None,
                spec_id: None,
                // The runner says what kind of work it is.
                ..Default::default()
            },
            cause(hook),
        )
    };
    let ran = runner::run(&ingress.inner.plugins, job).await;
    // Nothing of the run reads it any more (what it left running was killed).
    drop(body_file);
    let output = ran.output(OUTPUT_LIMIT);
    let (status, error) = match ran.ending {
        Ending::Completed => (DeliveryStatus::Completed, None),
        Ending::Failed(reason) => (DeliveryStatus::Failed, Some(reason)),
        Ending::TimedOut(reason) => (DeliveryStatus::TimedOut, Some(reason)),
        Ending::Interrupted(None) => (
            DeliveryStatus::Interrupted,
            Some("a planned stop ended the handler".to_string()),
        ),
        Ending::Interrupted(Some(reason)) => (
            DeliveryStatus::Interrupted,
            Some(format!(
                "a planned stop killed the handler's processes: {reason}"
            )),
        ),
        Ending::LimitBlocked(hit) => (DeliveryStatus::Failed, Some(hit.as_failure())),
        Ending::Blocked(blocker) => (
            DeliveryStatus::Failed,
            Some(format!("the handler reported blocked: {blocker}")),
        ),
    };
    match ran.result {
        Ok(report) => Ended {
            status,
            error,
            output,
            result: Some(json!({
                "mode": report.mode,
                "plugin": format!("{}@{}", report.plugin.name, report.plugin.version),
                "summary": report.outcome.summary,
            })),
        },
        Err(_) => Ended {
            status,
            error,
            output: None,
            result: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::bounded;

    #[test]
    fn bounded_cuts_at_the_first_nul_and_at_the_limit_on_a_character_boundary() {
        assert_eq!(bounded("abc", 8), ("abc", false));
        assert_eq!(bounded("ab\0cd", 8), ("ab", true));
        assert_eq!(bounded("\0", 8), ("", true));
        assert_eq!(bounded("abcdef", 4), ("abcd", true));
        // `é` is two bytes: a cut inside it moves back to before it.
        assert_eq!(bounded("abé", 3), ("ab", true));
        assert_eq!(bounded("abcdef\0", 4), ("abcd", true));
    }
}
