//! `/api/feed`: every event Canopy recorded, with its envelope, oldest first.
//!
//! `GET /api/feed?since=&event=&family=&project=&last=` answers `{"events": [...], "head": N}`:
//! the newest `last` matching events (default 100, at most 1000), or with `since` (a cursor, an
//! RFC 3339 time or a duration back from now) the first `last` after it; `head` is the newest
//! cursor of the whole feed, where a poller resumes.
//!
//! With `?follow=true` the answer is a server-sent-event stream: each event as `event: feed`,
//! `id: <cursor>`, `data: <envelope>`. A reconnecting client sends the standard `Last-Event-ID`
//! header and gets everything after that cursor, then the live events: the stream subscribes
//! to the bus before it reads the store, and a live event is sent only when every row before it
//! has been accounted for (a gap is read back from the store; on a database shared by several
//! daemons, a row still being committed is waited for), so nothing is skipped and nothing is
//! sent twice. A follower that falls more than [`canopy_core::bus::LIVE_BUFFER`] events
//! behind reads what it missed back from the store too, and gets a `lagged` event
//! `{"missed": N}` saying it happened. Filters apply to live events as to stored ones.

use canopy_model::requests::feed::FeedParams;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::SystemTime;

use super::docs::{JsonOrEvents, OneOf, get};
use aide::axum::ApiRouter;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use canopy_model::records::answers::FeedPage;
use futures_util::stream::{self, Stream, StreamExt};
use tokio::sync::broadcast;

use super::{ApiError, ApiJson, ApiQuery, AppState};
use canopy_model::events::{Envelope, EventPattern, Family};
use canopy_model::records::views::Lagged;
use canopy_store::feed::{FeedGap, FeedQuery, Since};
use canopy_store::{Store, StoreError};

/// Events a read returns without `last`.
pub const DEFAULT_LAST: usize = 100;
/// Events one read returns at most.
pub const MAX_LAST: usize = 1000;
/// Rows a follower reads from the store at once while it catches up.
const PAGE: usize = 1000;
/// How soon a follower waiting for a missing row (one another daemon has not committed yet)
/// looks again.
const GAP_RETRY: std::time::Duration = std::time::Duration::from_millis(10);
/// The header a reconnecting SSE client sends (HTTP headers are case-insensitive).
const LAST_EVENT_ID: &str = "last-event-id";

pub fn router() -> ApiRouter<AppState> {
    ApiRouter::new().api_route("/feed", get(feed))
}

/// Parses `since`: a cursor (a feed id), an RFC 3339 time, or a duration back from now.
fn parse_since(text: &str) -> Result<Since, ApiError> {
    let text = text.trim();
    let bad = || {
        ApiError::bad_request(format!(
            "query parameter `since`: `{text}` is neither a cursor (a feed id from 0 on, as in `head`), an RFC 3339 time (2026-01-31T12:00:00Z) nor a duration back from now (10m, 2h)"
        ))
    };
    if let Ok(cursor) = text.parse::<i64>() {
        return if cursor >= 0 {
            Ok(Since::Cursor(cursor))
        } else {
            Err(bad())
        };
    }
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ApiError::bad_request(format!(
            "query parameter `since`: `{text}` is past the largest cursor there can be ({})",
            i64::MAX
        )));
    }
    canopy_model::since::instant(text, SystemTime::now())
        .map(Since::Time)
        .map_err(|err| match err {
            canopy_model::since::SinceError::NotATime => bad(),
            other => ApiError::bad_request(other.message("query parameter `since`", text, "")),
        })
}

fn parse_family(text: &str) -> Result<Family, ApiError> {
    Family::parse(text.trim()).ok_or_else(|| {
        ApiError::bad_request(format!(
            "query parameter `family`: unknown family `{text}`{} (the families are {})",
            canopy_model::text::did_you_mean(
                text,
                canopy_model::events::FAMILIES.iter().map(|f| f.as_str())
            ),
            Family::names()
        ))
    })
}

fn parse_last(text: &str) -> Result<usize, ApiError> {
    match text.trim().parse::<usize>() {
        Ok(last) if last <= MAX_LAST => Ok(last),
        Ok(_) => Err(ApiError::bad_request(format!(
            "query parameter `last`: `{text}` is more than {MAX_LAST}, the most one read returns; read further with `since` (the cursor of the last event read)"
        ))),
        Err(_) => Err(ApiError::bad_request(format!(
            "query parameter `last`: `{text}` is not a number from 0 to {MAX_LAST}"
        ))),
    }
}

/// The `Last-Event-ID` a reconnecting client sent, if any.
fn last_event_id(headers: &HeaderMap) -> Result<Option<i64>, ApiError> {
    let Some(value) = headers.get(LAST_EVENT_ID) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or_default().trim();
    match text.parse::<i64>() {
        Ok(cursor) if cursor >= 0 => Ok(Some(cursor)),
        _ => Err(ApiError::bad_request(format!(
            "header `Last-Event-ID`: `{text}` is not a feed cursor (a whole number from 0 on, the `id` of an event this stream sent)"
        ))),
    }
}

/// The query the parameters ask for (`since` and `last` included).
fn query_of(params: &FeedParams) -> Result<FeedQuery, ApiError> {
    let events = match params.event.as_deref() {
        Some(text) => {
            let pattern = EventPattern::parse(text)
                .map_err(|err| ApiError::bad_request(format!("query parameter `event`: {err}")))?;
            Some(pattern.events().map(|def| def.name.to_string()).collect())
        }
        None => None,
    };
    let project = match params.project.as_deref().map(str::trim) {
        Some("") => {
            return Err(ApiError::bad_request(
                "query parameter `project`: it is empty; give a project's workdir (an absolute path)",
            ));
        }
        other => other.map(str::to_string),
    };
    Ok(FeedQuery {
        since: params.since.as_deref().map(parse_since).transpose()?,
        events,
        family: params.family.as_deref().map(parse_family).transpose()?,
        project,
        limit: params
            .last
            .as_deref()
            .map(parse_last)
            .transpose()?
            .unwrap_or(DEFAULT_LAST),
        until: None,
    })
}

/// A `project` filter as the feed records projects (a workdir): a configured project's name
/// stands for its checkout; any other value must be an absolute path.
fn project_workdir(state: &AppState, project: String) -> Result<String, ApiError> {
    if std::path::Path::new(&project).is_absolute() {
        return Ok(project);
    }
    let projects = state.bus.project_hooks();
    match projects.projects.iter().find(|p| p.name == project) {
        // Events name the checkout as the watcher resolved it.
        Some(known) => Ok(std::fs::canonicalize(&known.checkout)
            .unwrap_or_else(|_| known.checkout.clone())
            .to_string_lossy()
            .into_owned()),
        None => Err(ApiError::bad_request(format!(
            "query parameter `project`: no project is named `{project}`{}; give a project's name (`[projects.NAME]` in canopy.toml) or a workdir (an absolute path)",
            if projects.projects.is_empty() {
                String::new()
            } else {
                format!(
                    " (projects: {})",
                    projects
                        .projects
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        ))),
    }
}

async fn feed(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiQuery(params): ApiQuery<FeedParams>,
) -> Result<JsonOrEvents<FeedPage, OneOf<Envelope, Lagged>>, ApiError> {
    let mut query = query_of(&params)?;
    query.project = query
        .project
        .map(|project| project_workdir(&state, project))
        .transpose()?;
    if !params.follow {
        let (events, head) = state
            .store
            .read(move |rd| Ok::<_, StoreError>((rd.feed(&query)?, rd.feed_head()?)))
            .await?;
        return Ok(JsonOrEvents::new(ApiJson(FeedPage { events, head })));
    }
    // A stream from `since` sends every event after it, then the live ones: a count has no
    // place there (it was ignored).
    if params.since.is_some() && params.last.is_some() {
        return Err(ApiError::bad_request(
            "query parameter `last`: a stream from `since` sends every event after it, so `last` does not apply there; give `since` or `last`, not both",
        ));
    }
    // A reconnecting client's Last-Event-ID wins over the `since` of the URL it reconnects to.
    let since = match last_event_id(&headers)? {
        Some(cursor) => Some(Since::Cursor(cursor)),
        None => query.since.clone(),
    };
    let follow = Follow::start(&state, query, since).await?;
    Ok(JsonOrEvents::new(
        Sse::new(follow.stream().take_until(state.daemon.stopped()))
            .keep_alive(KeepAlive::default()),
    ))
}

/// A follower of the feed: what it has still to send, and how far it has looked.
struct Follow {
    store: Store,
    live: broadcast::Receiver<Arc<Envelope>>,
    /// The filters (`since` and `limit` are set per read).
    query: FeedQuery,
    /// Every row up to this cursor has been sent or passed over.
    cursor: i64,
    /// Rows after `cursor` may be in the store and not in `live`: read them from there first.
    behind: bool,
    /// A row after `cursor` still missing in the store, which may yet be committed (see
    /// `Rd::feed_settled`): the follower waits for it before it reads on.
    gap: FeedGap,
    /// What to send before anything else.
    queue: VecDeque<Out>,
}

/// What a follower sends.
#[derive(Debug, Clone, PartialEq)]
enum Out {
    /// A feed row.
    Row(Arc<Envelope>),
    /// The follower fell behind the live events by this many (and read them from the store).
    Lagged(u64),
}

impl Out {
    fn sse(&self) -> SseEvent {
        match self {
            Self::Row(envelope) => feed_event(envelope),
            Self::Lagged(missed) => lagged_event(*missed),
        }
    }
}

impl Follow {
    /// Subscribes to the bus, then reads where to start, so nothing recorded in between is
    /// missed: after `since`, or the newest `query.limit` events.
    async fn start(
        state: &AppState,
        query: FeedQuery,
        since: Option<Since>,
    ) -> Result<Self, ApiError> {
        let live = state.bus.subscribe();
        let mut follow = Self {
            store: state.store.clone(),
            live,
            query: FeedQuery {
                since: None,
                ..query
            },
            cursor: 0,
            behind: false,
            gap: FeedGap::default(),
            queue: VecDeque::new(),
        };
        match since {
            Some(since) => {
                let (cursor, head) = state
                    .store
                    .read(move |rd| {
                        let cursor = match &since {
                            Since::Cursor(cursor) => *cursor,
                            Since::Time(at) => rd.feed_cursor_at(*at)?,
                        };
                        Ok::<_, StoreError>((cursor, rd.feed_head()?))
                    })
                    .await?;
                // A cursor past the head is from another feed (a new data dir): start at the head.
                follow.cursor = cursor.min(head);
                follow.behind = true;
            }
            None => {
                let newest = follow.query.clone();
                let (rows, head) = state
                    .store
                    .read(move |rd| Ok::<_, StoreError>((rd.feed(&newest)?, rd.feed_head()?)))
                    .await?;
                follow
                    .queue
                    .extend(rows.into_iter().map(|r| Out::Row(Arc::new(r))));
                follow.cursor = head;
            }
        }
        Ok(follow)
    }

    fn stream(self) -> impl Stream<Item = Result<SseEvent, Infallible>> {
        stream::unfold(self, |mut follow| async move {
            let out = follow.next().await?;
            Some((Ok(out.sse()), follow))
        })
    }

    /// The next thing to send; `None` ends the stream.
    async fn next(&mut self) -> Option<Out> {
        loop {
            if let Some(event) = self.queue.pop_front() {
                return Some(event);
            }
            if self.behind {
                if let Err(err) = self.catch_up().await {
                    // The client reconnects with its Last-Event-ID and misses nothing.
                    tracing::error!(error = %err, cursor = self.cursor, "cannot read the feed for a follower; ending its stream");
                    return None;
                }
                continue;
            }
            match self.live.recv().await {
                Ok(envelope) => self.take(envelope),
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    // Start again from the newest live event, before the store is read (as at
                    // the start): what the old receiver still held is in the store, and it
                    // would report a lag again at the next event.
                    self.live = self.live.resubscribe();
                    self.queue.push_back(Out::Lagged(missed));
                    self.behind = true;
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// A live envelope: sent (when it matches) if it is the next row; read back from the store
    /// with what came before it if rows are missing (published out of order, or not at all);
    /// passed over if it was sent already.
    fn take(&mut self, envelope: Arc<Envelope>) {
        if envelope.id <= self.cursor {
            return;
        }
        if envelope.id != self.cursor + 1 {
            self.behind = true;
            return;
        }
        self.cursor = envelope.id;
        if self.query.matches(&envelope) {
            self.queue.push_back(Out::Row(envelope));
        }
    }

    /// Reads the next page after `cursor` from the store, up to what is settled there (no
    /// row that may still be committed is passed by); no longer behind once a page comes back
    /// short and nothing is missing. While a row is missing it reads again shortly.
    async fn catch_up(&mut self) -> Result<(), StoreError> {
        let (cursor, mut gap, filters) = (self.cursor, self.gap, self.query.clone());
        let (rows, settled, gap) = self
            .store
            .read(move |rd| {
                let settled = rd.feed_settled(cursor, &mut gap)?;
                let query = FeedQuery {
                    since: Some(Since::Cursor(cursor)),
                    limit: PAGE,
                    until: Some(settled.through),
                    ..filters
                };
                Ok::<_, StoreError>((rd.feed(&query)?, settled, gap))
            })
            .await?;
        self.gap = gap;
        match rows.last() {
            Some(last) if rows.len() == PAGE => self.cursor = last.id,
            _ => {
                self.cursor = self.cursor.max(settled.through);
                if settled.waiting {
                    tokio::time::sleep(GAP_RETRY).await;
                } else {
                    self.behind = false;
                }
            }
        }
        self.queue
            .extend(rows.into_iter().map(|r| Out::Row(Arc::new(r))));
        Ok(())
    }
}

/// One feed row as an SSE event; its id is the cursor a reconnecting client resumes after.
fn feed_event(envelope: &Envelope) -> SseEvent {
    SseEvent::default()
        .event("feed")
        .id(envelope.id.to_string())
        .data(serde_json::to_string(envelope).unwrap_or_default())
}

/// The `lagged` event: the follower fell behind the live events by `missed`; the stream reads
/// them back from the store and goes on.
fn lagged_event(missed: u64) -> SseEvent {
    SseEvent::default()
        .event(Lagged::EVENT)
        .data(serde_json::to_string(&Lagged { missed }).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn message(result: Result<impl std::fmt::Debug, ApiError>) -> String {
        result.unwrap_err().message
    }

    #[test]
    fn bad_values_name_the_parameter_and_what_it_takes() {
        let since = message(parse_since("yesterday"));
        assert!(
            since.starts_with("query parameter `since`: `yesterday` is neither a cursor"),
            "{since}"
        );
        assert!(message(parse_since("-3")).contains("`since`"));
        let family = message(parse_family("grph"));
        assert!(family.contains("query parameter `family`"), "{family}");
        assert!(family.contains("did you mean `graph`?"), "{family}");
        assert!(
            family.contains("graph, spec, node, hook, session, plugin"),
            "{family}"
        );
        assert!(message(parse_last("abc")).contains("from 0 to 1000"));
        assert!(message(parse_last("5000")).contains("more than 1000"));
    }

    use canopy_model::events::plugin::{PluginEnabled, PluginRef};
    use canopy_model::events::session::{SessionCreated, SessionRef};
    use canopy_model::events::{Cause, Event};

    fn plugin_event() -> Event {
        Event::new(&PluginEnabled(PluginRef {
            plugin: "p".to_string(),
            version: "1".to_string(),
            sha256: String::new(),
            modes: Vec::new(),
        }))
    }

    fn session_event() -> Event {
        Event::new(&SessionCreated(SessionRef {
            session_id: "s".to_string(),
            session_name: None,
            workdir: None,
        }))
    }

    /// Records the events in one write, as the bus does; returns their envelopes.
    async fn record(store: &Store, events: Vec<Event>) -> Vec<Arc<Envelope>> {
        store
            .write(move |tx| {
                events
                    .into_iter()
                    .map(|e| tx.append_feed("node", e, &Cause::user()).map(Arc::new))
                    .collect::<Result<Vec<_>, _>>()
            })
            .await
            .unwrap()
    }

    /// What the follower sends next, waiting at most a few seconds.
    async fn next(follow: &mut Follow) -> Out {
        tokio::time::timeout(std::time::Duration::from_secs(5), follow.next())
            .await
            .expect("the follower sent nothing")
            .expect("the stream ended")
    }

    async fn ids(follow: &mut Follow, count: usize) -> Vec<i64> {
        let mut ids = Vec::new();
        while ids.len() < count {
            match next(follow).await {
                Out::Row(envelope) => ids.push(envelope.id),
                Out::Lagged(missed) => panic!("lagged by {missed} after {ids:?}"),
            }
        }
        ids
    }

    #[tokio::test]
    async fn a_follower_sends_each_row_once_in_order_whatever_order_they_are_published_in() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("canopy.db")).unwrap();
        let (live, receiver) = broadcast::channel(8);
        let mut follow = Follow {
            store: store.clone(),
            live: receiver,
            query: FeedQuery::default(),
            cursor: 0,
            behind: false,
            gap: FeedGap::default(),
            queue: VecDeque::new(),
        };
        // Published out of order (two writers that committed 1 then 2 publish 2 first), and
        // one published twice: the follower reads the gap from the store and sends 1, 2, 3.
        let rows = record(&store, vec![plugin_event(), plugin_event(), plugin_event()]).await;
        for index in [1, 0, 2, 1] {
            live.send(rows[index].clone()).unwrap();
        }
        assert_eq!(ids(&mut follow, 3).await, vec![1, 2, 3]);

        // A row recorded but never published is read from the store when the next one comes.
        let unpublished = record(&store, vec![plugin_event()]).await;
        let next_row = record(&store, vec![plugin_event()]).await;
        assert_eq!(unpublished[0].id, 4);
        live.send(next_row[0].clone()).unwrap();
        assert_eq!(ids(&mut follow, 2).await, vec![4, 5]);

        // More than the channel holds: `lagged`, then every row from the store, once.
        let many = record(&store, (0..20).map(|_| plugin_event()).collect()).await;
        for envelope in &many {
            live.send(envelope.clone()).unwrap();
        }
        let Out::Lagged(missed) = next(&mut follow).await else {
            panic!("no lagged event");
        };
        assert!(missed > 0);
        assert_eq!(ids(&mut follow, 20).await, (6..26).collect::<Vec<_>>());
        // Live again, without another lag.
        let last = record(&store, vec![plugin_event()]).await;
        live.send(last[0].clone()).unwrap();
        assert_eq!(ids(&mut follow, 1).await, vec![26]);
    }

    #[tokio::test]
    async fn a_follower_sends_only_what_matches_its_filters_live_or_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("canopy.db")).unwrap();
        let (live, receiver) = broadcast::channel(16);
        let mut follow = Follow {
            store: store.clone(),
            live: receiver,
            query: FeedQuery {
                family: Some(Family::Session),
                ..FeedQuery::default()
            },
            cursor: 0,
            behind: true,
            gap: FeedGap::default(),
            queue: VecDeque::new(),
        };
        // A backlog: read from the store.
        record(
            &store,
            vec![plugin_event(), session_event(), plugin_event()],
        )
        .await;
        assert_eq!(ids(&mut follow, 1).await, vec![2]);
        // Live: the plugin events pass by, the session event is sent.
        let rows = record(
            &store,
            vec![plugin_event(), plugin_event(), session_event()],
        )
        .await;
        for envelope in &rows {
            live.send(envelope.clone()).unwrap();
        }
        assert_eq!(ids(&mut follow, 1).await, vec![6]);
        assert_eq!(follow.cursor, 6);
    }

    #[test]
    fn since_takes_a_cursor_a_time_or_a_duration() {
        assert_eq!(parse_since("42").unwrap(), Since::Cursor(42));
        assert_eq!(
            parse_since("2026-01-31T12:00:00Z").unwrap(),
            Since::Time("2026-01-31T12:00:00Z".parse().unwrap())
        );
        let Since::Time(at) = parse_since("10m").unwrap() else {
            panic!("a duration is a time");
        };
        let ago = at.elapsed();
        assert!(
            ago >= std::time::Duration::from_secs(600) && ago < std::time::Duration::from_secs(660),
            "{at}"
        );
    }
}
