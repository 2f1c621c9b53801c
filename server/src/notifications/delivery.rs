//! The delivery loop: every worker process runs one (contract §15). A pass claims the
//! notifications due on the database's clock, one conditional UPDATE each (its attempt number
//! is the fence: an attempt whose claim lapsed cannot record over a later one's), sends them,
//! and records each attempt and what follows: `delivered`; `pending` again after
//! `EXPORTD_WEBHOOK_RETRY_SECS`, doubling; or `failed` once 24 h have passed. A process that
//! dies or freezes mid-attempt leaves its claim to lapse after [`claim_for`] (twice the lease), and
//! another loop tries again: at least once, with the same `webhook-id`; the frozen one, if it
//! wakes, may send too, but records nothing over the later attempt.

use super::webhook::Attempt;
use super::{email, outbox, secrets, webhook};
use crate::config::Config;
use crate::entities::{notification_attempts, notifications};
use crate::metrics::Metrics;
use futures::StreamExt;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{ActiveModelTrait, ColumnTrait, Condition, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Set};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long a claimed attempt is its claimer's: twice `EXPORTD_LEASE_SECS` (60 s by default), and
/// never less than [`CLAIM_AT_LEAST`], longer than any attempt may take (a webhook's 10 s, an
/// email's 15 s).
pub fn claim_for(config: &Config) -> Duration {
    (config.lease * 2).max(CLAIM_AT_LEAST)
}

/// The shortest claim.
pub const CLAIM_AT_LEAST: Duration = Duration::from_secs(20);

/// The most notifications one pass claims.
const PASS_SIZE: u64 = 32;

/// How many are sent at once.
const AT_ONCE: usize = 8;

/// The longest a pass may take before it is abandoned.
const PASS_LIMIT: Duration = Duration::from_secs(120);

/// Runs the loop in a process that knows the page's address (`EXPORTD_PUBLIC_ORIGIN`), which
/// every notification links to; a process without it delivers nothing and says so once, and the
/// processes that have it deliver.
pub async fn run_if_linkable(db: DatabaseConnection, config: Arc<Config>, metrics: Metrics, shutdown: CancellationToken) {
    if config.public_origin.is_none() {
        tracing::info!(target: "exportd::lifecycle", "this process delivers no notifications: EXPORTD_PUBLIC_ORIGIN is not set");
        return;
    }
    run(db, config, metrics, shutdown).await;
}

/// Runs passes every `EXPORTD_NOTIFY_MS` until `shutdown`.
pub async fn run(db: DatabaseConnection, config: Arc<Config>, metrics: Metrics, shutdown: CancellationToken) {
    loop {
        let ran = tokio::select! {
            ran = tokio::time::timeout(PASS_LIMIT, pass(&db, &config, &metrics)) => ran,
            // An attempt in flight is dropped: its claim lapses and another process sends it.
            _ = shutdown.cancelled() => return,
        };
        match ran {
            Ok(Ok(sent)) if sent > 0 => tracing::debug!(sent, "delivery pass ended"),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "delivery pass failed; the next pass tries again"),
            Err(_) => tracing::warn!("delivery pass took too long; its claims lapse and the next pass tries again"),
        }
        tokio::select! {
            _ = tokio::time::sleep(config.notify.every) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

/// One pass: finds what is due, and claims each just before it sends it (so a claim never lapses
/// while it waits its turn), then records it. Returns how many attempts it made.
pub async fn pass(db: &DatabaseConnection, config: &Config, metrics: &Metrics) -> Result<usize, DbErr> {
    let now = crate::db::db_now_ms(db).await?;
    let due = notifications::Entity::find()
        .filter(notifications::Column::Status.eq("pending"))
        .filter(notifications::Column::NextAttemptAt.lte(now))
        .filter(Condition::any().add(notifications::Column::LeaseUntil.is_null()).add(notifications::Column::LeaseUntil.lt(now)))
        .order_by_asc(notifications::Column::NextAttemptAt)
        .limit(PASS_SIZE)
        .all(db)
        .await?;
    let sent: Vec<Result<bool, DbErr>> = futures::stream::iter(due)
        .map(|n| async move {
            // A row held elsewhere (a frozen process, a lock from psql) gives up after the pool's
            // lock_timeout and is passed over: it holds up no other notification.
            match claim(db, &n, claim_for(config)).await {
                Ok(true) => deliver(db, config, metrics, notifications::Model { attempts: n.attempts + 1, ..n }).await.map(|()| true),
                Ok(false) => Ok(false),
                Err(e) => {
                    tracing::warn!(notification = %n.id, error = %e, "a notification could not be claimed; the next pass tries again");
                    Ok(false)
                }
            }
        })
        .buffer_unordered(AT_ONCE)
        .collect()
        .await;
    let mut count = 0;
    for one in sent {
        count += usize::from(one?);
    }
    Ok(count)
}

/// Takes the next attempt of `n` if no one else did since it was read.
async fn claim(db: &DatabaseConnection, n: &notifications::Model, claim_for: Duration) -> Result<bool, DbErr> {
    let until = crate::job_store::db_now(db.get_database_backend()).add(claim_for.as_millis() as i64);
    let claimed = notifications::Entity::update_many()
        .col_expr(notifications::Column::Attempts, Expr::val(n.attempts + 1).into())
        .col_expr(notifications::Column::LeaseUntil, until)
        .filter(notifications::Column::Id.eq(&n.id))
        .filter(notifications::Column::Attempts.eq(n.attempts))
        .filter(notifications::Column::Status.eq("pending"))
        .exec(db)
        .await?;
    Ok(claimed.rows_affected == 1)
}

/// The event's body as sent: its links made absolute with the page's origin.
fn body(payload: &str, config: &Config) -> String {
    let origin = config.public_origin.as_ref().map(ToString::to_string).unwrap_or_default();
    let Ok(mut value) = serde_json::from_str::<serde_json::Value>(payload) else { return payload.to_owned() };
    if let Some(data) = value.get_mut("data").and_then(|d| d.as_object_mut()) {
        for link in ["status_url", "page_url"] {
            if let Some(serde_json::Value::String(path)) = data.get_mut(link) {
                *path = format!("{origin}{path}");
            }
        }
    }
    value.to_string()
}

/// Sends claimed attempt `n.attempts` of `n` and records it.
async fn deliver(db: &DatabaseConnection, config: &Config, metrics: &Metrics, n: notifications::Model) -> Result<(), DbErr> {
    // Tests freeze a process here, holding a claimed attempt.
    if crate::faults::Faults::default().check("notify_before_send", &n.id).is_err() {
        return Ok(());
    }
    let now = crate::db::db_now_ms(db).await?;
    let body = body(&n.payload, config);
    let attempt = match n.channel.as_str() {
        "webhook" => {
            let secret = secrets::ensure(db, &n.tenant_id, now).await?;
            webhook::send(&n.target, &n.id, now / 1000, &body, &secrets::signing(&secret, now), config.notify.allow_private).await
        }
        "email" => {
            let value: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            let data = &value["data"];
            let subject = data["report"].as_str().or_else(|| data["dataset"].as_str()).unwrap_or_default();
            let (title, text) = email::text(&n.language, &n.event_type, &n.operation_id, subject, data["page_url"].as_str().unwrap_or_default());
            email::send(&config.notify, &n.target, &title, &text).await
        }
        other => Attempt { outcome: "error", status_code: None, detail: Some(format!("unknown channel {other:?}")) },
    };
    record(db, config, metrics, &n, &attempt).await
}

/// What follows an attempt that was not delivered: the next try's time, or none once the
/// notification's 24 h are over. The wait doubles from the first attempt since it was written or
/// redelivered, and the last try is at the end of the 24 h.
pub fn next_try(n: &notifications::Model, retry: Duration, ended_at: i64) -> Option<i64> {
    if ended_at >= n.retry_until {
        return None;
    }
    let doublings = Ord::min(u32::try_from(n.attempts.saturating_sub(n.retry_base).saturating_sub(1)).unwrap_or(0), 20);
    let wait = (retry.as_millis() as i64).saturating_mul(1i64 << doublings);
    Some(Ord::min(ended_at.saturating_add(wait), n.retry_until))
}

/// Records attempt `n.attempts` and moves the notification on, if the attempt is still its own.
async fn record(db: &DatabaseConnection, config: &Config, metrics: &Metrics, n: &notifications::Model, attempt: &Attempt) -> Result<(), DbErr> {
    let now = crate::db::db_now_ms(db).await?;
    let (status, next) = if attempt.delivered() {
        ("delivered", None)
    } else {
        match next_try(n, config.notify.retry, now) {
            Some(next) => ("pending", Some(next)),
            None => ("failed", None),
        }
    };
    let txn = crate::job_store::begin_write(db).await?;
    let moved = notifications::Entity::update_many()
        .col_expr(notifications::Column::Status, Expr::val(status).into())
        .col_expr(notifications::Column::NextAttemptAt, Expr::val(next).into())
        .col_expr(notifications::Column::LeaseUntil, Expr::val(None::<i64>).into())
        .col_expr(notifications::Column::FinishedAt, Expr::val((status != "pending").then_some(now)).into())
        .filter(notifications::Column::Id.eq(&n.id))
        .filter(notifications::Column::Attempts.eq(n.attempts))
        .filter(notifications::Column::Status.eq("pending"))
        .exec(&txn)
        .await?;
    if moved.rows_affected == 0 {
        txn.rollback().await?;
        tracing::info!(target: "exportd::notifications", notification = %n.id, attempt = n.attempts, "an attempt whose claim lapsed was not recorded: a later attempt took it");
        return Ok(());
    }
    notification_attempts::ActiveModel {
        notification_id: Set(n.id.clone()),
        attempt: Set(n.attempts),
        at: Set(now),
        outcome: Set(attempt.outcome.to_owned()),
        status_code: Set(attempt.status_code),
        detail: Set(attempt.detail.clone().map(|d| d.chars().take(500).collect())),
    }
    .insert(&txn)
    .await?;
    txn.commit().await?;
    let outcome = match status {
        "delivered" => "delivered",
        "pending" => "retried",
        _ => "failed",
    };
    metrics.deliveries.with_label_values(&[n.channel.as_str(), outcome]).inc();
    if status == "failed" {
        tracing::warn!(notification = %n.id, operation = %n.operation_id, channel = %n.channel, "a notification was not delivered within its retries and is failed");
    }
    Ok(())
}

/// Sends notification `id` again from now (`exportd notifications redeliver`): pending, due at
/// once, retried for another 24 h from the first wait, under the same id. An attempt in flight is
/// fenced off (its number is passed), so it records nothing over this. `false` when there is no
/// such notification.
pub async fn redeliver(db: &DatabaseConnection, id: &str) -> Result<bool, DbErr> {
    let now = crate::db::db_now_ms(db).await?;
    let moved = notifications::Entity::update_many()
        .col_expr(notifications::Column::Attempts, Expr::col(notifications::Column::Attempts).add(1))
        .col_expr(notifications::Column::RetryBase, Expr::col(notifications::Column::Attempts).add(1))
        .col_expr(notifications::Column::Status, Expr::val("pending").into())
        .col_expr(notifications::Column::NextAttemptAt, Expr::val(now).into())
        .col_expr(notifications::Column::RetryUntil, Expr::val(now + outbox::RETRY_FOR_MS).into())
        .col_expr(notifications::Column::LeaseUntil, Expr::val(None::<i64>).into())
        .col_expr(notifications::Column::FinishedAt, Expr::val(None::<i64>).into())
        .filter(notifications::Column::Id.eq(id))
        .exec(db)
        .await?;
    Ok(moved.rows_affected == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(attempts: i32) -> notifications::Model {
        notifications::Model {
            id: "msg_1".into(),
            tenant_id: "t".into(),
            operation_id: "exp_1".into(),
            channel: "webhook".into(),
            target: "https://h.example".into(),
            language: "en".into(),
            event_type: "export.ready".into(),
            payload: "{}".into(),
            status: "pending".into(),
            attempts,
            retry_base: 0,
            next_attempt_at: None,
            retry_until: 100_000,
            lease_until: None,
            created_at: 0,
            finished_at: None,
        }
    }

    #[test]
    fn the_wait_doubles_with_each_attempt_and_the_last_try_is_at_the_end_of_the_retries() {
        let retry = Duration::from_secs(5);
        assert_eq!(next_try(&after(1), retry, 0), Some(5_000));
        assert_eq!(next_try(&after(2), retry, 0), Some(10_000));
        assert_eq!(next_try(&after(3), retry, 0), Some(20_000));
        assert_eq!(next_try(&after(5), retry, 0), Some(80_000));
        assert_eq!(next_try(&after(6), retry, 0), Some(100_000), "the wait is cut to the end");
        assert_eq!(next_try(&after(7), retry, 100_000), None, "an attempt at the end is the last");
    }

    #[test]
    fn a_redelivery_starts_the_doubling_again() {
        let retry = Duration::from_secs(5);
        let redelivered = notifications::Model { retry_base: 15, ..after(16) };
        assert_eq!(next_try(&redelivered, retry, 0), Some(5_000));
        assert_eq!(next_try(&notifications::Model { retry_base: 15, ..after(17) }, retry, 0), Some(10_000));
    }

    #[test]
    fn the_links_are_made_absolute_with_the_origin() {
        let mut config = Config::defaults("sqlite::memory:", "file:///tmp");
        config.public_origin = crate::config::PublicOrigin::parse("https://x.example");
        let sent = body(r#"{"type":"export.ready","data":{"id":"exp_1","status_url":"/api/exports/exp_1","page_url":"/?operation=exp_1"}}"#, &config);
        let value: serde_json::Value = serde_json::from_str(&sent).unwrap();
        assert_eq!(value["data"]["status_url"], "https://x.example/api/exports/exp_1");
        assert_eq!(value["data"]["page_url"], "https://x.example/?operation=exp_1");
    }
}
