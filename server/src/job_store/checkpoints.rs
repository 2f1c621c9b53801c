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

use super::fencing::{current, Refusal};
use super::{audit, begin_write, db_now, Mover};
use crate::entities::{import_refusals, jobs, job_checkpoints};
use app::ExportStatus;
use sea_orm::sea_query::{CaseStatement, Expr, ExprTrait};
use sea_orm::{ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QueryOrder, Set};

/// Fixes `plan` as the plan of `job`'s checkpoints unless an earlier attempt fixed one; returns
/// the plan in force, or why the attempt may not go on.
pub async fn fix_plan(db: &DatabaseConnection, job: &jobs::Model, plan: &str) -> Result<Result<String, Refusal>, DbErr> {
    let fixed = jobs::Entity::update_many()
        .col_expr(jobs::Column::CheckpointPlan, Expr::val(plan))
        .filter(jobs::Column::Id.eq(&job.id))
        .filter(jobs::Column::Generation.eq(job.generation))
        .filter(jobs::Column::Status.eq(ExportStatus::Running.as_str()))
        .filter(jobs::Column::CheckpointPlan.is_null())
        .exec(db)
        .await?;
    if fixed.rows_affected == 1 {
        return Ok(Ok(plan.to_owned()));
    }
    let row = jobs::Entity::find_by_id(job.id.clone()).one(db).await?;
    match row {
        Some(row) if row.generation == job.generation && row.status == ExportStatus::Running.as_str() => {
            Ok(row.checkpoint_plan.ok_or(Refusal::Lost))
        }
        _ => Ok(Err(Refusal::of(&current(db, &job.id).await?, job.generation))),
    }
}

fn rows_written_col() -> Expr {
    Expr::col((jobs::Entity, jobs::Column::RowsWritten))
}

fn has_checkpoints() -> Expr {
    Expr::col((jobs::Entity, jobs::Column::CheckpointSeq)).gt(0)
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
    let total = Expr::col((jobs::Entity, jobs::Column::RowsTotal));
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
    job: &jobs::Model,
    seq: i32,
    payload: &serde_json::Value,
    rows_written: i64,
    by: Mover<'_>,
) -> Result<Result<(), Refusal>, DbErr> {
    let txn = begin_write(db).await?;
    let Some(row) = open_step(&txn, job, seq, rows_written, None).await? else {
        txn.rollback().await?;
        return Ok(Err(refusal(db, job).await?));
    };
    close_step(&txn, job, &row, seq, payload, by).await?;
    txn.commit().await?;
    Ok(Ok(()))
}

/// Opens step `seq` inside `txn`, a write transaction the caller commits: the fenced UPDATE of
/// the job's row (this generation, `running`, the last checkpoint `seq - 1`, and `condition`
/// when given, such as the actor's authority). The row stays locked until the transaction ends,
/// so what the caller writes next in `txn` (an import batch's upserts) commits with the
/// checkpoint or not at all. `None`: refused, nothing written; the caller rolls back and asks
/// [`refusal`] why.
pub async fn open_step<C: ConnectionTrait>(
    txn: &C,
    job: &jobs::Model,
    seq: i32,
    rows_written: i64,
    condition: Option<Expr>,
) -> Result<Option<jobs::Model>, DbErr> {
    let mut update = jobs::Entity::update_many()
        .col_expr(jobs::Column::CheckpointSeq, Expr::val(seq))
        // Never fewer than shown: a heartbeat may already count the next part, read ahead.
        .col_expr(jobs::Column::RowsWritten, at_least_shown(rows_written))
        .col_expr(jobs::Column::LastProgressAt, db_now(txn.get_database_backend()))
        .filter(jobs::Column::Id.eq(&job.id))
        .filter(jobs::Column::Generation.eq(job.generation))
        .filter(jobs::Column::Status.eq(ExportStatus::Running.as_str()))
        .filter(Expr::col((jobs::Entity, jobs::Column::CheckpointSeq)).eq(seq - 1));
    if let Some(condition) = condition {
        update = update.filter(condition);
    }
    Ok(update.exec_with_returning(txn).await?.into_iter().next())
}

/// Closes step `seq` inside `txn`: its checkpoint row with `payload`, and its audit row. `row`
/// is what [`open_step`] returned.
pub async fn close_step<C: ConnectionTrait>(
    txn: &C,
    job: &jobs::Model,
    row: &jobs::Model,
    seq: i32,
    payload: &serde_json::Value,
    by: Mover<'_>,
) -> Result<(), DbErr> {
    let at = row.last_progress_at.unwrap_or(row.updated_at);
    job_checkpoints::Entity::insert(job_checkpoints::ActiveModel {
        job_id: Set(job.id.clone()),
        seq: Set(seq),
        generation: Set(job.generation),
        attempt: Set(job.attempt),
        at: Set(at),
        payload: Set(payload.to_string()),
    })
    .exec_without_returning(txn)
    .await?;
    audit::record_event(txn, row, by, at, &format!("checkpoint {seq}")).await
}

/// Why a step of `job` was refused, read after the caller rolled back.
pub async fn refusal(db: &DatabaseConnection, job: &jobs::Model) -> Result<Refusal, DbErr> {
    Ok(Refusal::of(&current(db, &job.id).await?, job.generation))
}

/// The checkpoints of a job, in order.
pub async fn of_job<C: ConnectionTrait>(db: &C, job_id: &str) -> Result<Vec<job_checkpoints::Model>, DbErr> {
    job_checkpoints::Entity::find()
        .filter(job_checkpoints::Column::JobId.eq(job_id))
        .order_by_asc(job_checkpoints::Column::Seq)
        .all(db)
        .await
}

/// The last checkpoint of a job, if it has one.
pub async fn last_of<C: ConnectionTrait>(db: &C, job_id: &str) -> Result<Option<job_checkpoints::Model>, DbErr> {
    job_checkpoints::Entity::find()
        .filter(job_checkpoints::Column::JobId.eq(job_id))
        .order_by_desc(job_checkpoints::Column::Seq)
        .one(db)
        .await
}

/// The checkpoints of these jobs.
pub async fn of_jobs<C: ConnectionTrait>(db: &C, job_ids: &[String]) -> Result<Vec<job_checkpoints::Model>, DbErr> {
    if job_ids.is_empty() {
        return Ok(Vec::new());
    }
    job_checkpoints::Entity::find().filter(job_checkpoints::Column::JobId.is_in(job_ids.iter().cloned())).all(db).await
}

/// Forgets every step a job recorded: its checkpoints and the rows its steps refused (a
/// redriven export starts again from nothing; a purged record goes with its steps).
pub async fn forget<C: ConnectionTrait>(db: &C, job_id: &str) -> Result<(), DbErr> {
    job_checkpoints::Entity::delete_many().filter(job_checkpoints::Column::JobId.eq(job_id)).exec(db).await?;
    import_refusals::Entity::delete_many().filter(import_refusals::Column::JobId.eq(job_id)).exec(db).await?;
    Ok(())
}

/// Forgets what the steps of `job` after its last checkpoint recorded (the refused rows of a
/// batch that was rolled back): the step runs again.
pub async fn forget_uncommitted<C: ConnectionTrait>(db: &C, job: &jobs::Model) -> Result<(), DbErr> {
    import_refusals::Entity::delete_many()
        .filter(import_refusals::Column::JobId.eq(&job.id))
        .filter(import_refusals::Column::Seq.gt(job.checkpoint_seq))
        .exec(db)
        .await?;
    Ok(())
}
