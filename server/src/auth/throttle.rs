//! Login backoff per (IP, email): after a few failures each further attempt waits longer. The
//! account itself is never locked: the same email from another address is unaffected.

use super::tokens::hash_secret;
use crate::entities::login_throttle;
use crate::error::AppError;
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, DbBackend, EntityTrait, QueryFilter, QuerySelect, Set, SqliteTransactionMode,
    TransactionOptions, TransactionTrait,
};

/// Failures allowed before backoff starts.
pub const FREE_FAILURES: i32 = 5;
/// The longest wait, in milliseconds.
pub const MAX_BACKOFF_MS: i64 = 15 * 60 * 1000;

fn key(ip: &str, email: &str) -> String {
    hash_secret(&format!("{ip}\n{email}"))
}

/// The wait after `failures` failures: none for the first few, then 1 s, 2 s, 4 s … up to 15 minutes.
pub fn backoff_ms(failures: i32) -> i64 {
    if failures < FREE_FAILURES {
        return 0;
    }
    let exp = (failures - FREE_FAILURES).min(20) as u32;
    (1000i64 << exp).min(MAX_BACKOFF_MS)
}

/// Reserves one login attempt for the pair, counted as a failure until it succeeds; refuses it
/// with 429 while the pair is waiting. The reservation is one serialised read-modify-write
/// (a row lock on PostgreSQL, an IMMEDIATE transaction on SQLite), so a burst of parallel
/// guesses gets no more attempts than a sequence would.
pub async fn reserve(db: &DatabaseConnection, ip: &str, email: &str, now_ms: i64) -> Result<(), AppError> {
    let id = key(ip, email);
    login_throttle::Entity::insert(login_throttle::ActiveModel {
        id: Set(id.clone()),
        failures: Set(0),
        blocked_until: Set(0),
        updated_at: Set(now_ms),
    })
    .on_conflict(OnConflict::column(login_throttle::Column::Id).do_nothing().to_owned())
    .exec_without_returning(db)
    .await?;
    let txn = db
        .begin_with_options(TransactionOptions { sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate), ..Default::default() })
        .await?;
    let mut find = login_throttle::Entity::find_by_id(id.clone());
    if db.get_database_backend() == DbBackend::Postgres {
        find = find.lock_exclusive();
    }
    let Some(row) = find.one(&txn).await? else {
        txn.rollback().await?;
        return Err(AppError::Internal("login throttle row vanished".into()));
    };
    if row.blocked_until > now_ms {
        txn.rollback().await?;
        let secs = ((row.blocked_until - now_ms) as u64).div_ceil(1000);
        return Err(AppError::RateLimited { retry_after_secs: secs.max(1) });
    }
    let failures = row.failures.saturating_add(1);
    let wait = backoff_ms(failures);
    login_throttle::Entity::update_many()
        .col_expr(login_throttle::Column::Failures, Expr::value(failures))
        .col_expr(login_throttle::Column::BlockedUntil, Expr::value(if wait > 0 { now_ms + wait } else { 0 }))
        .col_expr(login_throttle::Column::UpdatedAt, Expr::value(now_ms))
        .filter(login_throttle::Column::Id.eq(&id))
        .exec(&txn)
        .await?;
    txn.commit().await?;
    Ok(())
}

/// Forgets pairs that no longer hold anyone back: not blocked now, and idle for the longest
/// backoff (their count would no longer matter).
pub async fn purge<C: ConnectionTrait>(db: &C, now_ms: i64) -> Result<u64, sea_orm::DbErr> {
    let due = || {
        sea_orm::Condition::all()
            .add(login_throttle::Column::BlockedUntil.lte(now_ms))
            .add(login_throttle::Column::UpdatedAt.lt(now_ms - MAX_BACKOFF_MS))
    };
    // Looked for first: a DELETE takes SQLite's one write lock even when nothing is due, and the
    // janitor runs this every pass.
    if login_throttle::Entity::find().filter(due()).one(db).await?.is_none() {
        return Ok(0);
    }
    let gone = login_throttle::Entity::delete_many().filter(due()).exec(db).await?;
    Ok(gone.rows_affected)
}

/// Forgets the failures of a pair after a successful login.
pub async fn succeeded<C: ConnectionTrait>(db: &C, ip: &str, email: &str) -> Result<(), AppError> {
    login_throttle::Entity::delete_by_id(key(ip, email)).exec(db).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_starts_after_the_free_failures_and_doubles_up_to_the_cap() {
        assert_eq!(backoff_ms(4), 0);
        assert_eq!(backoff_ms(5), 1000);
        assert_eq!(backoff_ms(6), 2000);
        assert_eq!(backoff_ms(100), MAX_BACKOFF_MS);
    }
}
