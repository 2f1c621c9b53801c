//! The audit trail (SPEC §4): who moved an export, when, from which state to which, under which
//! generation; and every download. Rows are written in the transaction of what they record.

use super::Mover;
use crate::entities::{job_events, jobs};
use sea_orm::ActiveValue::{NotSet, Set};
use sea_orm::{ConnectionTrait, DbErr, EntityTrait};

/// Records the move a transition just made to `row` (as the UPDATE returned it: `previous_status`
/// is the state it moved from, `updated_at` the database's time of the move).
pub async fn record_move<C: ConnectionTrait>(db: &C, row: &jobs::Model, by: Mover<'_>, detail: Option<&str>) -> Result<(), DbErr> {
    insert(db, row, by, row.previous_status.clone(), row.updated_at, detail).await
}

/// Records the creation of `row`.
pub async fn record_created<C: ConnectionTrait>(db: &C, row: &jobs::Model, by: Mover<'_>) -> Result<(), DbErr> {
    insert(db, row, by, None, row.created_at, None).await
}

/// Records something that happened to `row` without a change of state (a minted link, a
/// download), at `at`.
pub async fn record_event<C: ConnectionTrait>(db: &C, row: &jobs::Model, by: Mover<'_>, at: i64, detail: &str) -> Result<(), DbErr> {
    insert(db, row, by, Some(row.status.clone()), at, Some(detail)).await
}

async fn insert<C: ConnectionTrait>(
    db: &C,
    row: &jobs::Model,
    by: Mover<'_>,
    from: Option<String>,
    at: i64,
    detail: Option<&str>,
) -> Result<(), DbErr> {
    job_events::Entity::insert(job_events::ActiveModel {
        id: NotSet,
        job_id: Set(row.id.clone()),
        tenant_id: Set(row.tenant_id.clone()),
        actor: Set(by.name()),
        at: Set(at),
        from_status: Set(from),
        to_status: Set(row.status.clone()),
        generation: Set(row.generation),
        detail: Set(detail.map(str::to_owned)),
    })
    .exec_without_returning(db)
    .await?;
    Ok(())
}
