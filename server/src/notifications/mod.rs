//! Notifications of finished operations (contract §15): an outbox written in the same
//! transaction as the terminal transition ([`outbox`]), delivered at least once by a loop in
//! every worker process ([`delivery`]) as Standard Webhooks ([`webhook`]) signed with the
//! tenant's secret ([`secrets`]), or as emails ([`email`]). A notification links to the page and
//! to the operation's status; it never carries the file, its rows or a download link.

pub mod delivery;
pub mod email;
pub mod outbox;
pub mod secrets;
pub mod webhook;

use crate::auth::Actor;
use crate::config::Config;
use crate::entities::{notification_attempts, notifications};
use crate::error::{AppError, FieldError};
use crate::job_store::kind::JobKind;
use crate::service::context::ServiceContext;
use app::schedules::{NotificationAttempt, NotificationList, NotificationView};
use app::model::Notify;
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder};

/// The most email addresses one request may name.
pub const MAX_EMAILS: usize = 10;

/// What is wrong with a request's `notify` on this server, field by field: the shape of its
/// targets, and what the server needs to send them (the page's origin for the links, an SMTP
/// server for emails).
pub fn check(notify: Option<&Notify>, config: &Config) -> Vec<FieldError> {
    let Some(notify) = notify else { return Vec::new() };
    let mut errors = Vec::new();
    if notify.webhook.is_none() && notify.email.is_empty() {
        errors.push(FieldError::new("/notify", "a webhook, an email, or both"));
    }
    if let Some(hook) = &notify.webhook {
        // The URL parser would drop a tab or a line break silently: refused, like any control character.
        if hook.chars().any(char::is_control) {
            errors.push(FieldError::new("/notify/webhook", "no control characters"));
        } else if let Err(problem) = webhook::target(hook, config.notify.allow_private) {
            errors.push(FieldError::new("/notify/webhook", problem));
        }
    }
    if notify.email.len() > MAX_EMAILS {
        errors.push(FieldError::new("/notify/email", format!("at most {MAX_EMAILS} addresses")));
    }
    for (i, address) in notify.email.iter().enumerate() {
        if address.len() > crate::service::ids::EMAIL_MAX || address.parse::<lettre::Address>().is_err() {
            errors.push(FieldError::new(format!("/notify/email/{i}"), "an email address"));
        }
    }
    if !notify.email.is_empty() && (config.notify.smtp_url.is_none() || config.notify.smtp_from.is_none()) {
        errors.push(FieldError::new("/notify/email", "this server sends no email: EXPORTD_SMTP_URL and EXPORTD_SMTP_FROM are not set"));
    }
    if config.public_origin.is_none() {
        errors.push(FieldError::new("/notify", "a notification links to the page, and this server does not know its address: EXPORTD_PUBLIC_ORIGIN is not set"));
    }
    errors
}

/// The deliveries of operation `id`, newest first, with their attempts, for an actor who may read
/// the operation (any other id is the operation's own 404).
pub async fn for_operation(state: &ServiceContext, actor: &Actor, id: &str) -> Result<NotificationList, AppError> {
    match JobKind::of_id(id) {
        Some(JobKind::Export) => crate::exports::service::find_own(&state.db, actor, id).await?,
        Some(JobKind::Import) => crate::imports::service::find_own(&state.db, actor, id).await?,
        None => return Err(AppError::ExportNotFound),
    };
    Ok(NotificationList { items: listed(&state.db, Some(id), None, 100).await? })
}

/// Notifications, newest first: of one operation, or in one status, at most `limit`, each with
/// its attempts, oldest first.
pub async fn listed<C: ConnectionTrait>(db: &C, operation: Option<&str>, status: Option<&str>, limit: u64) -> Result<Vec<NotificationView>, sea_orm::DbErr> {
    use sea_orm::QuerySelect;
    let mut query = notifications::Entity::find().order_by_desc(notifications::Column::CreatedAt).order_by_desc(notifications::Column::Id).limit(limit);
    if let Some(operation) = operation {
        query = query.filter(notifications::Column::OperationId.eq(operation));
    }
    if let Some(status) = status {
        query = query.filter(notifications::Column::Status.eq(status));
    }
    let rows = query.all(db).await?;
    let ids: Vec<String> = rows.iter().map(|n| n.id.clone()).collect();
    let attempts = notification_attempts::Entity::find()
        .filter(notification_attempts::Column::NotificationId.is_in(ids))
        .order_by_asc(notification_attempts::Column::Attempt)
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .map(|n| {
            let next_attempt_at = if n.status == "pending" { n.next_attempt_at.map(crate::clock::rfc3339) } else { None };
            NotificationView {
            attempts: attempts
                .iter()
                .filter(|a| a.notification_id == n.id)
                .map(|a| NotificationAttempt { attempt: a.attempt, at: crate::clock::rfc3339(a.at), outcome: a.outcome.clone(), status_code: a.status_code })
                .collect(),
            id: n.id,
            operation: n.operation_id,
            channel: n.channel,
            target: n.target,
            event_type: n.event_type,
            status: n.status,
            created_at: crate::clock::rfc3339(n.created_at),
            next_attempt_at,
        }})
        .collect())
}
