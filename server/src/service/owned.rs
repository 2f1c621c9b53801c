//! What a user's jobs of every kind share: who owns them, the outcomes of a create and a cancel,
//! the cancel itself, and pages of the owner's jobs.

use super::context::ServiceContext;
use crate::auth::Actor;
use crate::entities::jobs;
use crate::error::AppError;
use crate::job_store::intake::Owner;
use crate::job_store::kind::JobKind;
use crate::job_store::listing;
use crate::job_store::transitions::{self, Outcome};
use sea_orm::EntityTrait;

/// What a create did, for an operation of any kind shown as `V` (an export's, an import's view).
#[derive(Debug)]
pub enum CreateOutcome<V> {
    /// A new operation was accepted.
    Created(V),
    /// The key was already bound to this intent; the current state of that operation.
    Replayed(V),
}

/// Counts a create's answer in the metrics: a replay, or a key bound to another request.
pub fn counted<V>(state: &ServiceContext, outcome: Result<CreateOutcome<V>, AppError>) -> Result<CreateOutcome<V>, AppError> {
    match &outcome {
        Ok(CreateOutcome::Replayed(_)) => state.metrics.replays.inc(),
        Err(AppError::IdempotencyKeyReused { .. }) => state.metrics.key_reuse_conflicts.inc(),
        _ => {}
    }
    outcome
}

/// The actor as the owner of the jobs it creates.
pub fn owner(actor: &Actor) -> Owner<'_> {
    Owner { tenant_id: &actor.tenant_id, actor_id: &actor.user_id }
}

/// What a cancel did (SPEC §3): 200 for `cancelled`, 202 for `cancel_requested`.
#[derive(Debug)]
pub enum CancelOutcome<V> {
    /// Cancelled at once (was queued or retry_wait), or already cancelled.
    Cancelled(V),
    /// The worker stops at its next checkpoint (was running), or already asked.
    Requested(V),
}

/// Asks the job store to cancel the job `m`, which the actor was admitted to (their own, or a
/// schedule's run they own or administer), and returns the job as it is after: moved, or (not
/// in a cancellable state) as it is now.
pub async fn cancel_own(state: &ServiceContext, actor: &Actor, m: &jobs::Model) -> Result<jobs::Model, AppError> {
    let by = transitions::Canceller::User { tenant_id: &actor.tenant_id, actor_id: &m.actor_id, by: &actor.user_id };
    Ok(match transitions::cancel(&state.db, &m.id, by).await? {
        Outcome::Moved(row) => *row,
        Outcome::NotMoved(_) => jobs::Entity::find_by_id(m.id.clone()).one(&state.db).await?.ok_or(AppError::ExportNotFound)?,
    })
}

/// The default and largest page sizes of `GET /api/exports`.
pub const LIST_DEFAULT: u64 = 20;
/// The largest page size.
pub const LIST_MAX: u64 = 100;

/// A page of the actor's jobs of `kind`: `limit` 1–100 (default 20), after `cursor`; either
/// malformed is 422.
pub async fn list_page(state: &ServiceContext, actor: &Actor, kind: JobKind, limit: Option<&str>, cursor: Option<&str>) -> Result<listing::Page, AppError> {
    let limit = match limit {
        None => LIST_DEFAULT,
        Some(s) => s.parse::<u64>().ok().filter(|n| (1..=LIST_MAX).contains(n)).ok_or_else(|| {
            AppError::InvalidRequest(vec![crate::error::FieldError::new("/limit", "limit must be a whole number from 1 to 100")])
        })?,
    };
    listing::page(&state.db, owner(actor), kind, limit, cursor).await.map_err(|e| match e {
        listing::ListError::BadCursor => AppError::InvalidRequest(vec![crate::error::FieldError::new("/cursor", "not a cursor this API gave out")]),
        listing::ListError::Db(e) => e.into(),
    })
}
