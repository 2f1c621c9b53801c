//! What a fenced write finds when it is refused: the row's status and generation now, and why a
//! worker's write under its generation did not apply. The transitions and the checkpoints both
//! read it; it depends on neither.

use crate::entities::jobs;
use app::ExportStatus;
use sea_orm::{ConnectionTrait, DbErr, EntityTrait, QuerySelect};
use ExportStatus::{CancelRequested, Running};

/// The state of a row that a transition did not move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current {
    /// Its status now; `None` when the row is gone (purged).
    pub status: Option<ExportStatus>,
    /// Its generation now.
    pub generation: i32,
}

/// Why a worker's fenced write was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Still this generation, but cancel was asked.
    CancelRequested,
    /// Still this generation and running, but the actor is no longer authorised.
    Revoked,
    /// Not this worker's any more: another generation, or finished.
    Lost,
}

impl Refusal {
    /// Why a write under `generation` was refused, from how the row is now.
    pub(crate) fn of(current: &Current, generation: i32) -> Refusal {
        match current.status {
            Some(Running) if current.generation == generation => Refusal::Revoked,
            Some(CancelRequested) if current.generation == generation => Refusal::CancelRequested,
            _ => Refusal::Lost,
        }
    }
}

/// The row's status and generation now.
pub async fn current<C: ConnectionTrait>(db: &C, id: &str) -> Result<Current, DbErr> {
    let row = jobs::Entity::find_by_id(id.to_owned())
        .select_only()
        .column(jobs::Column::Status)
        .column(jobs::Column::Generation)
        .into_tuple::<(String, i32)>()
        .one(db)
        .await?;
    Ok(match row {
        Some((status, generation)) => Current { status: ExportStatus::parse(&status), generation },
        None => Current { status: None, generation: 0 },
    })
}
