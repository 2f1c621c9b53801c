//! The outbox: when a job moves into a terminal state (`ready`, `failed`, `cancelled`) and its
//! request carries `notify`, one row per delivery is written in the transition's own
//! transaction, so a notification exists exactly when the transition committed. Nothing is sent
//! here: the delivery loop ([`super::delivery`]) does that, with its own retries.

use crate::entities::{jobs, notifications};
use crate::job_store::kind::JobKind;
use app::model::Notify;
use app::ExportStatus;
use sea_orm::{ActiveModelTrait, ConnectionTrait, DbErr, Set};
use serde_json::{json, Value};

/// How long an undelivered notification is retried (contract §15: 24 h).
pub const RETRY_FOR_MS: i64 = 24 * 3600 * 1000;

/// The event of a terminal state, or `None` for any other.
fn event(kind: JobKind, status: &str) -> Option<String> {
    let done = ExportStatus::parse(status).filter(|s| matches!(s, ExportStatus::Ready | ExportStatus::Failed | ExportStatus::Cancelled))?;
    Some(format!("{}.{}", kind.as_str(), done.as_str()))
}

/// The `notify` of a stored request, if it has one.
pub fn notify_of(request: &str) -> Option<Notify> {
    let value: Value = serde_json::from_str(request).ok()?;
    serde_json::from_value(value.get("notify")?.clone()).ok()
}

/// The path of the page that shows operation `id` (the origin is added when it is sent).
pub fn page_path(id: &str) -> String {
    format!("/?operation={id}")
}

/// The event's body, its links as paths: `type`, `timestamp` and `data` of contract §15.
pub fn payload(row: &jobs::Model, kind: JobKind, event_type: &str) -> Value {
    let artifact = match (&row.artifact_sha256, row.artifact_bytes) {
        (Some(sha256), Some(bytes)) if row.status == ExportStatus::Ready.as_str() => json!({ "sha256": sha256, "bytes": bytes, "rows": row.artifact_rows }),
        _ => Value::Null,
    };
    let mut data = json!({
        "id": row.id,
        "status": row.status,
        "status_url": format!("/api/{}/{}", kind.api_collection(), row.id),
        "page_url": page_path(&row.id),
        "artifact": artifact,
    });
    if let Some(map) = data.as_object_mut() {
        map.insert(kind.subject_field().to_owned(), Value::String(row.report.clone()));
        if let (Some(code), Some(message)) = (&row.error_code, &row.error_message) {
            map.insert("error".to_owned(), json!({ "code": code, "message": message }));
        }
    }
    json!({ "type": event_type, "timestamp": crate::clock::rfc3339(row.updated_at), "data": data })
}

/// Writes the notifications of `row`'s transition, inside the transition's transaction `txn`,
/// if it moved into a terminal state and its request asked for them.
pub async fn record<C: ConnectionTrait>(txn: &C, row: &jobs::Model) -> Result<usize, DbErr> {
    if row.previous_status.as_deref() == Some(row.status.as_str()) {
        return Ok(0);
    }
    let Some(kind) = JobKind::parse(&row.kind) else { return Ok(0) };
    let Some(event_type) = event(kind, &row.status) else { return Ok(0) };
    let Some(notify) = notify_of(&row.request) else { return Ok(0) };
    let body = payload(row, kind, &event_type).to_string();
    // An address named twice gets one email.
    let mut addresses: Vec<&str> = notify.email.iter().map(String::as_str).collect();
    addresses.sort_unstable();
    addresses.dedup();
    let targets = notify.webhook.iter().map(|w| ("webhook", w.as_str())).chain(addresses.into_iter().map(|e| ("email", e)));
    let mut written = 0;
    for (channel, target) in targets {
        notifications::ActiveModel {
            id: Set(format!("msg_{}", uuid::Uuid::now_v7().simple())),
            tenant_id: Set(row.tenant_id.clone()),
            operation_id: Set(row.id.clone()),
            channel: Set(channel.to_owned()),
            target: Set(target.to_owned()),
            language: Set(notify.language.code().to_owned()),
            event_type: Set(event_type.clone()),
            payload: Set(body.clone()),
            status: Set("pending".to_owned()),
            attempts: Set(0),
            retry_base: Set(0),
            next_attempt_at: Set(Some(row.updated_at)),
            retry_until: Set(row.updated_at + RETRY_FOR_MS),
            lease_until: Set(None),
            created_at: Set(row.updated_at),
            finished_at: Set(None),
        }
        .insert(txn)
        .await?;
        written += 1;
    }
    Ok(written)
}

/// Deletes the notifications of job `id` and their attempts (the job's record is purged).
pub async fn forget<C: ConnectionTrait>(txn: &C, id: &str) -> Result<(), DbErr> {
    use crate::entities::notification_attempts;
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QuerySelect};
    let ids: Vec<String> = notifications::Entity::find().select_only().column(notifications::Column::Id).filter(notifications::Column::OperationId.eq(id)).into_tuple().all(txn).await?;
    if !ids.is_empty() {
        notification_attempts::Entity::delete_many().filter(notification_attempts::Column::NotificationId.is_in(ids)).exec(txn).await?;
        notifications::Entity::delete_many().filter(notifications::Column::OperationId.eq(id)).exec(txn).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_terminal_states_are_events() {
        assert_eq!(event(JobKind::Export, "ready").as_deref(), Some("export.ready"));
        assert_eq!(event(JobKind::Import, "cancelled").as_deref(), Some("import.cancelled"));
        assert_eq!(event(JobKind::Export, "failed").as_deref(), Some("export.failed"));
        for waiting in ["queued", "running", "retry_wait", "cancel_requested"] {
            assert_eq!(event(JobKind::Export, waiting), None, "{waiting}");
        }
    }

    #[test]
    fn a_request_without_notify_has_none_and_one_with_it_is_read() {
        assert_eq!(notify_of(r#"{"report":"orders"}"#), None);
        let n = notify_of(r#"{"report":"orders","notify":{"webhook":"https://h.example/x","email":["a@b.example"],"language":"ar"}}"#).unwrap();
        assert_eq!(n.webhook.as_deref(), Some("https://h.example/x"));
        assert_eq!(n.email, vec!["a@b.example".to_owned()]);
    }
}
