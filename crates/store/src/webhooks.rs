//! Webhook deliveries (`webhook_deliveries`): one row per authenticated request, written before
//! the request is answered, then moved through its handler's run.
//!
//! `accepted` -> `running` -> `completed` | `failed` | `timed_out` | `interrupted`; or `ignored`
//! (the hook's rules refused it) from the start. A delivery found `running` when the daemon
//! starts had begun before a crash: it becomes `interrupted_unknown` (its effects are unknown)
//! and is never replayed; one found `accepted` runs.

use crate::sql::{self, Conn, Queries, Row, params};
use serde_json::Value;

use super::states::{Sql, state};
use super::times::{At, time, time_opt};
use super::{Rd, StoreError, Tx};
use canopy_model::records::webhooks::{Delivery, DeliveryStatus};
use canopy_model::time::Timestamp;

/// A delivery to record.
#[derive(Debug, Clone)]
pub struct NewDelivery {
    pub id: String,
    pub scope: String,
    pub hook: String,
    pub handler: String,
    pub node: String,
    pub status: DeliveryStatus,
    pub reason: Option<String>,
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub content_type: Option<String>,
    /// The recorded headers (never the auth headers), as `[name, value]` pairs.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub redelivery_of: Option<String>,
    /// Recorded by `canopy webhooks test`.
    pub test: bool,
    pub received_at: Timestamp,
    /// When its handler started: set for a delivery recorded `running` from the start.
    pub started_at: Option<Timestamp>,
    /// The sender's own id of the delivery (`X-GitHub-Delivery`), when the hook deduplicates
    /// by one: a retry or redelivery repeats it.
    pub sender_delivery_id: Option<String>,
}

/// How a handler run ended.
#[derive(Debug, Clone)]
pub struct DeliveryEnd {
    pub status: DeliveryStatus,
    pub error: Option<String>,
    /// The tail of what it printed.
    pub output: Option<String>,
    /// What it made: `{"spec_id", ...}` for a spec, `{"mode", "plugin", "summary"}` for executor work.
    pub result: Option<Value>,
    pub duration_ms: i64,
}

/// Which deliveries to list.
#[derive(Debug, Clone, Default)]
pub struct DeliveryFilter {
    pub scope: Option<String>,
    pub hook: Option<String>,
    pub status: Option<DeliveryStatus>,
    /// The newest this many.
    pub last: usize,
}

const COLUMNS: &str = "id, scope, hook, handler, node, status, reason, method, path, query, content_type, headers, size, redelivery_of, test, received_at, started_at, finished_at, duration_ms, error, output, result";

fn from_row(row: &Row<'_>) -> sql::Result<Delivery> {
    let json = |index: usize| -> sql::Result<Option<Value>> {
        let text: Option<String> = row.get(index)?;
        text.map(|t| serde_json::from_str(&t))
            .transpose()
            .map_err(|e| sql::Error::column(index, e.into()))
    };
    let headers: Vec<(String, String)> = json(11)?
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    Ok(Delivery {
        id: row.get(0)?,
        scope: row.get(1)?,
        hook: row.get(2)?,
        handler: row.get(3)?,
        node: row.get(4)?,
        status: state(row, 5)?,
        reason: row.get(6)?,
        method: row.get(7)?,
        path: row.get(8)?,
        query: row.get(9)?,
        content_type: row.get(10)?,
        headers,
        size: row.get(12)?,
        redelivery_of: row.get(13)?,
        test: row.get(14)?,
        received_at: time(row, 15)?,
        started_at: time_opt(row, 16)?,
        finished_at: time_opt(row, 17)?,
        duration_ms: row.get(18)?,
        error: row.get(19)?,
        output: row.get(20)?,
        result: json(21)?,
    })
}

impl NewDelivery {
    /// The delivery as [`Tx::insert_delivery`] records it, without reading it back.
    pub fn recorded(&self) -> Delivery {
        Delivery {
            id: self.id.clone(),
            scope: self.scope.clone(),
            hook: self.hook.clone(),
            handler: self.handler.clone(),
            node: self.node.clone(),
            status: self.status,
            reason: self.reason.clone(),
            method: self.method.clone(),
            path: self.path.clone(),
            query: self.query.clone(),
            content_type: self.content_type.clone(),
            headers: self.headers.clone(),
            size: body_size(&self.body),
            redelivery_of: self.redelivery_of.clone(),
            test: self.test,
            received_at: self.received_at,
            started_at: self.started_at,
            finished_at: None,
            duration_ms: None,
            error: None,
            output: None,
            result: None,
        }
    }
}

/// A body's size as the `size` column holds it.
fn body_size(body: &[u8]) -> i64 {
    i64::try_from(body.len()).unwrap_or(i64::MAX)
}

impl Tx<'_> {
    /// Records a delivery.
    pub fn insert_delivery(&self, new: &NewDelivery) -> Result<(), StoreError> {
        let headers = serde_json::to_string(&new.headers)?;
        let size = body_size(&new.body);
        self.execute("INSERT INTO webhook_deliveries (id, scope, hook, handler, node, status, reason, method, path, query, content_type, headers, size, body, redelivery_of, test, received_at, started_at, sender_delivery_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)", params![
                new.id,
                new.scope,
                new.hook,
                new.handler,
                new.node,
                Sql(new.status),
                new.reason,
                new.method,
                new.path,
                new.query,
                new.content_type,
                headers,
                size,
                new.body,
                new.redelivery_of,
                new.test,
                At(new.received_at),
                new.started_at.map(At),
                new.sender_delivery_id,
            ])?;
        Ok(())
    }

    /// Marks an accepted delivery running; false when it is not accepted (another worker, or
    /// a redelivery, took it).
    pub fn start_delivery(&self, id: &str) -> Result<bool, StoreError> {
        let changed = self.execute("UPDATE webhook_deliveries SET status = 'running', started_at = ?2 WHERE id = ?1 AND status = 'accepted'", params![id, super::now()])?;
        Ok(changed == 1)
    }

    /// Records a running delivery's end; false when it was not running.
    pub fn finish_delivery(&self, id: &str, end: &DeliveryEnd) -> Result<bool, StoreError> {
        let result = end.result.as_ref().map(Value::to_string);
        let changed = self.execute("UPDATE webhook_deliveries SET status = ?2, error = ?3, output = ?4, result = ?5, duration_ms = ?6, finished_at = ?7
                 WHERE id = ?1 AND status = 'running'", params![
                id,
                Sql(end.status),
                end.error,
                end.output,
                result,
                end.duration_ms,
                super::now()
            ])?;
        Ok(changed == 1)
    }

    /// At start: deliveries whose handler had started when the daemon last stopped become
    /// `interrupted_unknown` (never replayed). Returns them.
    pub fn interrupt_started_deliveries(&self, reason: &str) -> Result<Vec<Delivery>, StoreError> {
        let ids: Vec<String> = self.query_map(
            "SELECT id FROM webhook_deliveries WHERE status = 'running'",
            params![],
            |row| row.get(0),
        )?;
        self.execute(
            "UPDATE webhook_deliveries SET status = 'interrupted_unknown', error = ?1, finished_at = ?2 WHERE status = 'running'", params![reason, super::now()])?;
        ids.iter().map(|id| self.delivery(id)).collect()
    }
}

impl Rd<'_> {
    /// The first delivery of `scope/hook` whose sender named it `sender_id`, received at
    /// `since` or later.
    pub fn delivery_by_sender_id(
        &self,
        scope: &str,
        hook: &str,
        sender_id: &str,
        since: Timestamp,
    ) -> Result<Option<Delivery>, StoreError> {
        let id: Option<String> = self.query_opt(
            "SELECT id FROM webhook_deliveries
                 WHERE scope = ?1 AND hook = ?2 AND sender_delivery_id = ?3 AND received_at >= ?4
                 ORDER BY received_at LIMIT 1",
            params![scope, hook, sender_id, At(since)],
            |row| row.get(0),
        )?;
        id.map(|id| self.delivery(&id)).transpose()
    }

    /// Resolves a delivery id or unambiguous id prefix.
    pub fn resolve_delivery(&self, prefix: &str) -> Result<String, StoreError> {
        self.resolve_id("webhook_deliveries", "delivery", prefix)
    }

    /// One delivery (without its body).
    pub fn delivery(&self, id: &str) -> Result<Delivery, StoreError> {
        self.query_opt(
            &format!("SELECT {COLUMNS} FROM webhook_deliveries WHERE id = ?1"),
            params![id],
            from_row,
        )?
        .ok_or_else(|| StoreError::NotFound {
            kind: "delivery",
            id: id.to_string(),
        })
    }

    /// A delivery with its body.
    pub fn delivery_with_body(&self, id: &str) -> Result<(Delivery, Vec<u8>), StoreError> {
        let delivery = self.delivery(id)?;
        let body: Vec<u8> = self.query_row(
            "SELECT body FROM webhook_deliveries WHERE id = ?1",
            params![id],
            |row| row.get(0),
        )?;
        Ok((delivery, body))
    }

    /// The oldest accepted deliveries of a hook (its queue as recorded), at most `limit`.
    pub fn accepted_deliveries(
        &self,
        scope: &str,
        hook: &str,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let order = self.dialect().insertion_order();
        Ok(self.query_map(
            &format!("SELECT id FROM webhook_deliveries WHERE status = 'accepted' AND scope = ?1 AND hook = ?2 ORDER BY received_at, {order} LIMIT ?3"),
            params![scope, hook, limit],
            |row| row.get(0),
        )?)
    }

    /// `(scope, hook, count)` of every hook with accepted deliveries.
    pub fn accepted_by_hook(&self) -> Result<Vec<(String, String, i64)>, StoreError> {
        Ok(self.query_map(
            "SELECT scope, hook, COUNT(*) FROM webhook_deliveries WHERE status = 'accepted' GROUP BY scope, hook",
            params![],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )?)
    }

    /// Deliveries, newest first.
    pub fn list_deliveries(&self, filter: &DeliveryFilter) -> Result<Vec<Delivery>, StoreError> {
        let limit = i64::try_from(filter.last.clamp(1, 10_000)).unwrap_or(10_000);
        // Only the filters given, so the planner can seek the `(scope, hook, received_at)`
        // index with them (see [`super::feed`]).
        let mut terms: Vec<&str> = Vec::new();
        let mut args: Vec<(&str, &dyn sql::ToSql)> = vec![(":limit", &limit)];
        if let Some(scope) = &filter.scope {
            terms.push("scope = :scope");
            args.push((":scope", scope));
        }
        if let Some(hook) = &filter.hook {
            terms.push("hook = :hook");
            args.push((":hook", hook));
        }
        let status = filter.status.map(Sql);
        if let Some(status) = &status {
            terms.push("status = :status");
            args.push((":status", status));
        }
        let clause = if terms.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", terms.join(" AND "))
        };
        let order = self.dialect().insertion_order();
        Ok(self.query_map_named(
            &format!(
                "SELECT {COLUMNS} FROM webhook_deliveries {clause}
                 ORDER BY received_at DESC, {order} DESC LIMIT :limit"
            ),
            args.as_slice(),
            from_row,
        )?)
    }

    /// How many deliveries have each status (of one hook, when given).
    pub fn count_deliveries(
        &self,
        scope: Option<&str>,
        hook: Option<&str>,
    ) -> Result<Vec<(DeliveryStatus, i64)>, StoreError> {
        Ok(self.query_map("SELECT status, COUNT(*) FROM webhook_deliveries WHERE (CAST(?1 AS TEXT) IS NULL OR scope = ?1) AND (CAST(?2 AS TEXT) IS NULL OR hook = ?2) GROUP BY status", params![scope, hook], |row| Ok((state(row, 0)?, row.get(1)?)))?)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::Store;

    #[test]
    fn a_delivery_as_recorded_is_what_the_store_reads_back() {
        crate::each_backend::check(a_delivery_as_recorded_is_what_the_store_reads_back_on);
    }

    fn a_delivery_as_recorded_is_what_the_store_reads_back_on(store: &Store) {
        let new = NewDelivery {
            id: crate::new_ordered_id(),
            scope: "global".into(),
            hook: "h".into(),
            handler: "command".into(),
            node: "n1".into(),
            status: DeliveryStatus::Running,
            reason: None,
            method: "POST".into(),
            path: "/hooks/global/h".into(),
            query: Some("wait=true".into()),
            content_type: Some("application/json".into()),
            headers: vec![("x-github-event".into(), "push".into())],
            body: b"{\"ref\":\"main\"}".to_vec(),
            redelivery_of: None,
            test: false,
            received_at: Timestamp::now(),
            started_at: Some(Timestamp::now()),
            sender_delivery_id: None,
        };
        let expected = serde_json::to_value(new.recorded()).unwrap();
        let id = new.id.clone();
        store
            .write_blocking(move |tx| tx.insert_delivery(&new))
            .unwrap();
        let read = store
            .read_blocking(move |rd| rd.delivery_with_body(&id))
            .unwrap();
        assert_eq!(serde_json::to_value(read.0).unwrap(), expected);
        assert_eq!(read.1, b"{\"ref\":\"main\"}");
    }
}
