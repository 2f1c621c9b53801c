//! Checkpoints (SPEC §5.1, and §10's import batches): a job that works in steps records each
//! finished step with one fenced UPDATE of its row — the next number, under the attempt's
//! generation, while it runs — and the step's own row, in one transaction with its audit row.
//! Only checkpointed steps count: a later attempt (after a crash, a lost lease, a store outage, a
//! stall or a hand-back) continues after the last one, and a step that a worker which lost its
//! lease finishes is refused, so it is never used.
//!
//! What a step is belongs to its job's kind (a checkpointed export's part, an import's batch):
//! here it is a JSON payload. So is the plan a job's first attempt fixes for every later one (a
//! checkpointed export's part size and highest key).

use super::transitions::{current, Refusal};
use super::{audit, begin_write, db_now, Mover};
use crate::entities::{exports, job_checkpoints};
use app::ExportStatus;
use sea_orm::sea_query::{CaseStatement, Expr, ExprTrait};
use sea_orm::{ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QueryOrder, Set};

/// Fixes `plan` as the plan of `job`'s checkpoints unless an earlier attempt fixed one; returns
/// the plan in force, or why the attempt may not go on.
pub async fn fix_plan(db: &DatabaseConnection, job: &exports::Model, plan: &str) -> Result<Result<String, Refusal>, DbErr> {
    let fixed = exports::Entity::update_many()
        .col_expr(exports::Column::CheckpointPlan, Expr::val(plan))
        .filter(exports::Column::Id.eq(&job.id))
        .filter(exports::Column::Generation.eq(job.generation))
        .filter(exports::Column::Status.eq(ExportStatus::Running.as_str()))
        .filter(exports::Column::CheckpointPlan.is_null())
        .exec(db)
        .await?;
    if fixed.rows_affected == 1 {
        return Ok(Ok(plan.to_owned()));
    }
    let row = exports::Entity::find_by_id(job.id.clone()).one(db).await?;
    match row {
        Some(row) if row.generation == job.generation && row.status == ExportStatus::Running.as_str() => {
            Ok(row.checkpoint_plan.ok_or(Refusal::Lost))
        }
        _ => Ok(Err(Refusal::of(&current(db, &job.id).await?, job.generation))),
    }
}

fn rows_written_col() -> Expr {
    Expr::col((exports::Entity, exports::Column::RowsWritten))
}

fn has_checkpoints() -> Expr {
    Expr::col((exports::Entity, exports::Column::CheckpointSeq)).gt(0)
}

/// `rows_written` as a new claim or a hand-back leaves it: a job with checkpoints keeps what it
/// shows (its next attempt continues after them, so its progress does not go back to nothing);
/// any other job starts again from none.
pub(super) fn rows_kept_across_attempts() -> Expr {
    CaseStatement::new().case(has_checkpoints(), rows_written_col()).finally(Expr::val(0i64)).into()
}

/// `rows_total` likewise: a job with checkpoints keeps the total its plan fixed; any other's is
/// unknown until its next attempt counts it.
pub(super) fn total_kept_across_attempts() -> Expr {
    let total = Expr::col((exports::Entity, exports::Column::RowsTotal));
    CaseStatement::new().case(has_checkpoints(), total).finally(Expr::val(Option::<i64>::None)).into()
}

/// `rows_written` reported as `rows` by a heartbeat: a job with checkpoints never shows fewer
/// rows than it did (an attempt that resumes re-reads the part the last one left unfinished, and
/// a part read ahead was already counted); any other job shows `rows`.
pub(super) fn rows_reported(rows: i64) -> Expr {
    CaseStatement::new().case(has_checkpoints(), at_least_shown(rows)).finally(Expr::val(rows)).into()
}

/// `rows`, or the rows already shown when they are more.
fn at_least_shown(rows: i64) -> Expr {
    CaseStatement::new().case(rows_written_col().gt(rows), rows_written_col()).finally(Expr::val(rows)).into()
}

/// Records step `seq` (one more than the job's last) of `job` with `payload`, and `rows_written`
/// as its progress, under the attempt's generation while it runs. Refused — nothing recorded —
/// when the job is no longer this attempt's, or a cancel was asked.
pub async fn record(
    db: &DatabaseConnection,
    job: &exports::Model,
    seq: i32,
    payload: &serde_json::Value,
    rows_written: i64,
    by: Mover<'_>,
) -> Result<Result<(), Refusal>, DbErr> {
    let backend = db.get_database_backend();
    let now = || db_now(backend);
    let txn = begin_write(db).await?;
    let moved = exports::Entity::update_many()
        .col_expr(exports::Column::CheckpointSeq, Expr::val(seq))
        // Never fewer than shown: a heartbeat may already count the next part, read ahead.
        .col_expr(exports::Column::RowsWritten, at_least_shown(rows_written))
        .col_expr(exports::Column::LastProgressAt, now())
        .filter(exports::Column::Id.eq(&job.id))
        .filter(exports::Column::Generation.eq(job.generation))
        .filter(exports::Column::Status.eq(ExportStatus::Running.as_str()))
        .filter(Expr::col((exports::Entity, exports::Column::CheckpointSeq)).eq(seq - 1))
        .exec_with_returning(&txn)
        .await?;
    let Some(row) = moved.into_iter().next() else {
        txn.rollback().await?;
        return Ok(Err(Refusal::of(&current(db, &job.id).await?, job.generation)));
    };
    let at = row.last_progress_at.unwrap_or(row.updated_at);
    job_checkpoints::Entity::insert(job_checkpoints::ActiveModel {
        job_id: Set(job.id.clone()),
        seq: Set(seq),
        generation: Set(job.generation),
        attempt: Set(job.attempt),
        at: Set(at),
        payload: Set(payload.to_string()),
    })
    .exec_without_returning(&txn)
    .await?;
    audit::record_event(&txn, &row, by, at, &format!("checkpoint {seq}")).await?;
    txn.commit().await?;
    Ok(Ok(()))
}

/// The checkpoints of a job, in order.
pub async fn of_job<C: ConnectionTrait>(db: &C, job_id: &str) -> Result<Vec<job_checkpoints::Model>, DbErr> {
    job_checkpoints::Entity::find()
        .filter(job_checkpoints::Column::JobId.eq(job_id))
        .order_by_asc(job_checkpoints::Column::Seq)
        .all(db)
        .await
}

/// The checkpoints of these jobs.
pub async fn of_jobs<C: ConnectionTrait>(db: &C, job_ids: &[String]) -> Result<Vec<job_checkpoints::Model>, DbErr> {
    if job_ids.is_empty() {
        return Ok(Vec::new());
    }
    job_checkpoints::Entity::find().filter(job_checkpoints::Column::JobId.is_in(job_ids.iter().cloned())).all(db).await
}

/// Forgets a job's checkpoints and its plan (a redriven job starts again from nothing: what its
/// steps produced may have been swept since it failed).
pub async fn forget<C: ConnectionTrait>(db: &C, job_id: &str) -> Result<(), DbErr> {
    job_checkpoints::Entity::delete_many().filter(job_checkpoints::Column::JobId.eq(job_id)).exec(db).await?;
    Ok(())
}
